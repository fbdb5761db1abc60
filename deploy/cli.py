"""The ``deploy`` command: arguments in, exit code out. It knows nothing of how steps work.

Exit codes (DESIGN.md): 0 desired state, 1 failed and rolled back, 2 invalid input,
3 rollback failed (a human must look), 4 some host not attempted. Expected errors print one
line; anything else is a bug and prints a traceback with a request to report it.

Imports of the engine, SSH and YAML happen inside the commands, so ``deploy --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from deploy.errors import EXIT_INPUT, DeployError, InputError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _inventory_path(value: str | None) -> Path:
    return Path(value or os.environ.get("DEPLOY_INVENTORY") or "hosts.yaml")


def _playbooks_dir(inventory: Path) -> Path:
    """``./playbooks``, else the one beside the inventory."""
    here = Path("playbooks")
    return here if here.is_dir() else inventory.parent / "playbooks"


def _fail(error: DeployError) -> NoReturn:
    click.echo(f"deploy: {error}", err=True)
    sys.exit(error.exit_code)


inventory_option = click.option(
    "-i",
    "--inventory",
    metavar="FILE",
    help="Inventory file (default: $DEPLOY_INVENTORY, else ./hosts.yaml).",
)
limit_option = click.option(
    "-l",
    "--limit",
    "limit",
    multiple=True,
    metavar="PATTERN",
    help="Only these hosts: names, groups, globs, !exclusions (repeatable).",
)
accept_new_option = click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Trust and record host keys seen for the first time (changed keys are still refused).",
)
forks_option = click.option(
    "--forks", type=click.IntRange(1, 256), default=10, show_default=True, help="Hosts in parallel."
)


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="deploy")
def main() -> None:
    """Change live hosts over SSH, verified, with automatic rollback.

    \b
      deploy apply kimi-eagle3            plan, confirm, run on every host of the playbook
      deploy apply kimi-eagle3 --check    what would change, as a diff; touches nothing
      deploy rollback                     put back what the last run changed
      deploy history                      what ran where, when, with what outcome
    """


@main.command(context_settings=CONTEXT)
@click.argument("playbook")
@inventory_option
@limit_option
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    metavar="KEY=VALUE",
    help="Variable, highest precedence (repeatable; @file.yaml too).",
)
@click.option(
    "--check", is_flag=True, help="Show what would change (unified diff) and touch nothing."
)
@click.option("--diff", "show_diff", is_flag=True, help="Show the diff of every changed file.")
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (required without a terminal)."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (the full report) on stdout."
)
@click.option(
    "--tags",
    multiple=True,
    metavar="TAG",
    help="Only steps with one of these tags (comma-separated or repeated).",
)
@click.option(
    "--skip-tags", multiple=True, metavar="TAG", help="Skip steps with any of these tags."
)
@click.option("-v", "--verbose", count=True, help="More detail (-vv: also the commands run).")
@accept_new_option
@forks_option
def apply(
    playbook: str,
    inventory: str | None,
    limit: tuple[str, ...],
    extra: tuple[str, ...],
    check: bool,
    show_diff: bool,
    yes: bool,
    as_json: bool,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    verbose: int,
    accept_new_host_keys: bool,
    forks: int,
) -> None:
    """Run PLAYBOOK (a name in playbooks/ or a path) on its hosts."""
    from deploy.config import load
    from deploy.engine.fleet import run_apply
    from deploy.engine.host_run import RunOptions
    from deploy.engine.journal import new_run_id

    inventory_path = _inventory_path(inventory)
    try:
        inv = load.load_inventory(inventory_path)
        pb = load.load_playbook(load.find_playbook(playbook, _playbooks_dir(inventory_path)))
        plans = load.resolve(
            inv,
            pb,
            extra_vars=load.parse_extra_vars(list(extra)),
            limit=list(limit) or None,
            tags=_split(tags),
            skip_tags=_split(skip_tags),
        )
    except InputError as exc:
        _fail(exc)
    if not plans:
        _fail(InputError("no host matches the playbook's hosts and --limit"))
    interactive = sys.stdin.isatty() and not as_json
    if not check and not yes and not interactive:
        _fail(
            InputError(
                "refusing to change hosts without confirmation: pass --yes (no terminal to ask on)"
            )
        )
    work = [(p.name, p.spec, p.steps, p.vars) for p in plans]
    name = pb.playbook.name
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    progress = _progress(as_json, verbose)
    if not check and not yes:
        preview = run_apply(
            work,
            RunOptions(
                run_id=new_run_id(),
                playbook=name,
                check_mode=True,
                accept_new_host_keys=accept_new_host_keys,
            ),
            forks=forks,
        )
        from deploy.report.human import render_plan

        click.echo(render_plan(preview, colour=colour))
        if all(h.outcome in ("unchanged", "not attempted") for h in preview.hosts):
            click.echo("\nNothing to change.")
            _finish(preview, as_json=False, show_diff=False, record=False)
        if not click.confirm("\nApply these changes?", default=False):
            click.echo("Nothing was changed.")
            sys.exit(0)
    options = RunOptions(
        run_id=new_run_id(),
        playbook=name,
        check_mode=check,
        accept_new_host_keys=accept_new_host_keys,
        progress=progress,
    )
    run = run_apply(work, options, forks=forks)
    if check and not as_json:
        from deploy.report.human import render_plan

        click.echo(render_plan(run, colour=colour))
    _finish(run, as_json=as_json, show_diff=show_diff, record=not check)


@main.command(context_settings=CONTEXT)
@click.argument("run_id", required=False)
@inventory_option
@limit_option
@click.option(
    "--force", is_flag=True, help="Restore even files that changed since deploy wrote them."
)
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (required without a terminal)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@accept_new_option
@forks_option
def rollback(
    run_id: str | None,
    inventory: str | None,
    limit: tuple[str, ...],
    force: bool,
    yes: bool,
    as_json: bool,
    accept_new_host_keys: bool,
    forks: int,
) -> None:
    """Put back what RUN_ID (default: each host's last run not yet undone) changed."""
    from deploy.config import load
    from deploy.engine.fleet import run_rollback
    from deploy.engine.journal import new_run_id

    inventory_path = _inventory_path(inventory)
    try:
        inv = load.load_inventory(inventory_path)
        hosts = load.resolve_hosts(inv, limit=list(limit) or None)
    except InputError as exc:
        _fail(exc)
    if not hosts:
        _fail(InputError("no host matches --limit"))
    if not yes:
        if not sys.stdin.isatty() or as_json:
            _fail(
                InputError(
                    "refusing to roll back without confirmation: pass --yes (no terminal to ask on)"
                )
            )
        what = f"run {run_id}" if run_id else "the last run"
        names = ", ".join(name for name, _ in hosts)
        if not click.confirm(f"Roll back {what} on {names}?", default=False):
            click.echo("Nothing was changed.")
            sys.exit(0)
    run = run_rollback(
        hosts,
        run_id=new_run_id(),
        target_run=run_id,
        force=force,
        accept_new_host_keys=accept_new_host_keys,
        forks=forks,
    )
    _finish(run, as_json=as_json, show_diff=False, record=True)


@main.command(context_settings=CONTEXT)
@inventory_option
@click.option(
    "--playbooks",
    "playbooks_dir",
    metavar="DIR",
    help="Directory of playbooks (default: ./playbooks).",
)
def validate(inventory: str | None, playbooks_dir: str | None) -> None:
    """Check the inventory and every playbook offline; contacts no host."""
    from deploy.config import load

    inventory_path = _inventory_path(inventory)
    directory = Path(playbooks_dir) if playbooks_dir else _playbooks_dir(inventory_path)
    try:
        problems = load.validate_all(inventory_path, directory)
    except InputError as exc:
        _fail(exc)
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        sys.exit(EXIT_INPUT)
    count = len(list(directory.glob("*.yaml")))
    click.echo(f"ok: {inventory_path} and {count} playbook(s) in {directory}")


@main.command(context_settings=CONTEXT)
@click.option("--host", metavar="NAME", help="Only runs that involved this host.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("-n", "--last", type=int, default=20, show_default=True, help="How many runs.")
def history(host: str | None, as_json: bool, last: int) -> None:
    """What ran where, when, with what outcome (from this workstation's records)."""
    import json

    from deploy.engine import history as store
    from deploy.report.human import render_history

    runs = store.load_all(host)[-last:]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in runs], indent=2))
    else:
        click.echo(render_history(runs))


@main.command(context_settings=CONTEXT)
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(run_id: str, as_json: bool) -> None:
    """Show one recorded run in full."""
    import json

    from deploy.engine import history as store
    from deploy.report.human import render_summary

    run = store.load(run_id)
    if run is None:
        _fail(InputError(f"no recorded run {run_id} (see `deploy history`)"))
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2))
    else:
        click.echo(render_summary(run, diffs=True))


def _split(values: tuple[str, ...]) -> set[str] | None:
    items = {part.strip() for value in values for part in value.split(",") if part.strip()}
    return items or None


def _progress(as_json: bool, verbose: int) -> Any:
    from deploy.engine.host_run import NoProgress
    from deploy.report.human import ProgressPrinter

    return NoProgress() if as_json else ProgressPrinter(sys.stderr, verbose=verbose)


def _finish(run: Any, *, as_json: bool, show_diff: bool, record: bool) -> NoReturn:
    from deploy.report.human import render_summary

    if record:
        from deploy.engine import history as store

        try:
            store.save(run)
        except OSError as exc:
            click.echo(f"deploy: warning: could not record the run in history: {exc}", err=True)
    if as_json:
        import json

        click.echo(json.dumps(run.to_dict(), indent=2, sort_keys=True))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        click.echo(render_summary(run, colour=colour, diffs=show_diff))
    sys.exit(run.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
