"""The ``deploy`` command: arguments in, exit code out. It knows nothing of how steps work.

Exit codes (DESIGN.md): 0 desired state, 1 failed and rolled back, 2 invalid input,
3 rollback failed (a human must look), 4 some host not attempted. Expected errors print one
line; anything else is a bug and prints a traceback with a request to report it.

Imports of the engine, SSH and YAML happen inside the commands, so ``deploy --help`` stays fast.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from deploy.cli_common import (
    _FILE,
    CONTEXT,
    _fail,
    _inventory_path,
    _playbooks_dir,
    accept_new_option,
    forks_option,
    inventory_option,
    json_option,
    limit_option,
    startup_done,
    unattended_options,
)
from deploy.cli_records import history, show, status
from deploy.cli_tools import demo, schedule, schema_command, validate
from deploy.errors import DeployError, InputError
from deploy.masking import mask_terminal

__all__ = [
    "CONTEXT",
    "_FILE",
    "_fail",
    "_inventory_path",
    "_playbooks_dir",
    "accept_new_option",
    "apply",
    "demo",
    "forks_option",
    "history",
    "inventory_option",
    "json_option",
    "limit_option",
    "main",
    "rollback",
    "schedule",
    "schema_command",
    "show",
    "status",
    "unattended_options",
    "validate",
]


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="deploy")
def main() -> None:
    """Change live hosts over SSH, verified, with automatic rollback.

    \b
      deploy apply kimi-eagle3            plan, confirm, run on every host of the playbook
      deploy apply kimi-eagle3 --check    what would change, as a diff; touches nothing
      deploy rollback                     put back what the last run changed
      deploy history                      what ran where, when, with what outcome
      deploy status                       each host's lock, last run, unfinished runs
      deploy schedule kimi-eagle3 --on-calendar "Mon *-*-* 03:00"   a systemd timer for it
    """
    # Start-up is imports and validation: no garbage worth collecting (see `startup_done`).
    gc.disable()
    mask_terminal()  # secrets are *** in everything printed (deploy.masking)


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
@json_option
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
@click.option("--serial", metavar="N|N%[,...]", help="Rolling batches (overrides the playbook's).")
@click.option("--max-fail", metavar="N|N%", help="Failed hosts a batch may have (default 0).")
@click.option(
    "--wait-lock",
    type=click.FloatRange(min=0),
    default=0,
    metavar="SECONDS",
    help="If this playbook+inventory is already running here, wait (default: exit 4 at once).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Stop a process on a service's port even if its command line is not the service's.",
)
@unattended_options
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
    serial: str | None,
    max_fail: str | None,
    wait_lock: float,
    timeout: float | None,
    report_file: Path | None,
    log_file: Path | None,
    notify_url: str | None,
    force: bool,
) -> None:
    """Run PLAYBOOK (a name in playbooks/ or a path) on its hosts."""
    from deploy.config import load
    from deploy.engine import batches, local_lock
    from deploy.engine.fleet import Listeners, run_apply
    from deploy.engine.host_run import RunOptions, holder_info
    from deploy.engine.journal import new_run_id

    _logging(verbose)
    inventory_path = _inventory_path(inventory)
    run_id = new_run_id()
    out = _delivery(f"apply {playbook}", run_id, report_file, log_file, notify_url)
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
        sizes = serial or pb.playbook.serial
        pace = {
            "serial": batches.parse_serial(sizes) if sizes is not None else None,
            "max_fail": _maybe(batches.parse_max_fail, max_fail, pb.playbook.max_fail),
            "timeout": timeout,
        }
        if not plans:
            raise InputError("no host matches the playbook's hosts and --limit")
        interactive = sys.stdin.isatty() and not as_json
        if not check and not yes and not interactive:
            raise InputError(
                "refusing to change hosts without confirmation: pass --yes (no terminal to ask on)"
            )
        if not check:  # held until this process ends, however it ends
            local_lock.acquire(
                pb.path, inventory_path, holder_info(run_id, pb.playbook.name), wait=wait_lock
            )
    except DeployError as exc:
        _fail(exc, out)
    startup_done()
    work = plans
    name = pb.playbook.name
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    progress = Listeners(_progress(as_json, verbose), out.log_file)
    if not check and not yes:
        preview = run_apply(
            work,
            RunOptions(
                run_id=new_run_id(),
                playbook=name,
                check_mode=True,
                accept_new_host_keys=accept_new_host_keys,
                force=force,
            ),
            forks=forks,
        )
        from deploy.report.human import render_plan

        click.echo(render_plan(preview, colour=colour))
        if all(
            h.outcome in ("unchanged", "not attempted") and not h.recovered for h in preview.hosts
        ):
            click.echo("\nNothing to change.")
            _finish(preview, as_json=False, show_diff=False, record=False, out=out)
        if not click.confirm("\nApply these changes?", default=False):
            click.echo("Nothing was changed.")
            sys.exit(0)
    options = RunOptions(
        run_id=run_id,
        playbook=name,
        check_mode=check,
        accept_new_host_keys=accept_new_host_keys,
        progress=progress,
        force=force,
    )
    run = run_apply(work, options, forks=forks, **pace)
    if check and not as_json:
        from deploy.report.human import render_plan

        click.echo(render_plan(run, colour=colour))
    _finish(run, as_json=as_json, show_diff=show_diff, record=not check, out=out)


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
@json_option
@accept_new_option
@forks_option
@unattended_options
def rollback(
    run_id: str | None,
    inventory: str | None,
    limit: tuple[str, ...],
    force: bool,
    yes: bool,
    as_json: bool,
    accept_new_host_keys: bool,
    forks: int,
    timeout: float | None,
    report_file: Path | None,
    log_file: Path | None,
    notify_url: str | None,
) -> None:
    """Put back what RUN_ID (default: each host's last run not yet undone) changed."""
    from deploy.config import load
    from deploy.engine.fleet import run_rollback
    from deploy.engine.journal import new_run_id

    new_id = new_run_id()
    out = _delivery("rollback", new_id, report_file, log_file, notify_url)
    inventory_path = _inventory_path(inventory)
    try:
        inv = load.load_inventory(inventory_path)
        hosts = load.resolve_hosts(inv, limit=list(limit) or None)
        if not hosts:
            raise InputError("no host matches --limit")
        if not yes and (not sys.stdin.isatty() or as_json):
            raise InputError(
                "refusing to roll back without confirmation: pass --yes (no terminal to ask on)"
            )
    except InputError as exc:
        _fail(exc, out)
    startup_done()
    if not yes:
        what = f"run {run_id}" if run_id else "the last run"
        names = ", ".join(name for name, _ in hosts)
        if not click.confirm(f"Roll back {what} on {names}?", default=False):
            click.echo("Nothing was changed.")
            sys.exit(0)
    run = run_rollback(
        hosts,
        run_id=new_id,
        target_run=run_id,
        force=force,
        accept_new_host_keys=accept_new_host_keys,
        forks=forks,
        timeout=timeout,
    )
    _finish(run, as_json=as_json, show_diff=False, record=True, out=out)


def _split(values: tuple[str, ...]) -> set[str] | None:
    items = {part.strip() for value in values for part in value.split(",") if part.strip()}
    return items or None


def _progress(as_json: bool, verbose: int) -> Any:
    from deploy.engine.host_run import NoProgress
    from deploy.report.human import ProgressPrinter

    return NoProgress() if as_json else ProgressPrinter(sys.stderr, verbose=verbose)


def _finish(run: Any, *, as_json: bool, show_diff: bool, record: bool, out: Any) -> NoReturn:
    """Record and deliver the run, print it (summary or JSON), exit with its code."""
    from deploy.report.human import render_summary

    plain = render_summary(run, colour=False, diffs=show_diff)
    for warning in out.finished(run, record=record, summary=plain):
        click.echo(f"deploy: warning: {warning}", err=True)
    if as_json:
        import json

        click.echo(json.dumps(run.to_dict(), indent=2, sort_keys=True))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        click.echo(render_summary(run, colour=colour, diffs=show_diff) if colour else plain)
    if any(host.outcome == "interrupted" for host in run.hosts):
        # Abandoned host threads may still be inside paramiko: exit without joining them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(run.exit_code)
    sys.exit(run.exit_code)


def _delivery(
    what: str, run_id: str, report: Path | None, log_file: Path | None, url: str | None
) -> Any:
    from deploy.report.delivery import Delivery

    return Delivery.open(
        what, run_id, report=report, log_file=log_file, notify_url=url, argv=sys.argv[1:]
    )


def _maybe(parse: Any, *values: Any) -> Any:
    """``parse`` the first value given (command line before playbook), or None."""
    value = next((v for v in values if v is not None), None)
    return None if value is None else parse(value)


def _logging(verbose: int) -> None:
    """``-v``: the engine's notes; ``-vv``: also debug records (the commands run on hosts)."""
    import logging

    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger = logging.getLogger("deploy")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


for _command in (validate, history, show, status, schedule, schema_command, demo):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    main()
