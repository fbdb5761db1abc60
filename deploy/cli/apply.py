"""``deploy apply``: plan, confirm, run a playbook on its hosts, print and record the result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from deploy.cli.common import (
    CONTEXT,
    _fail,
    _find_playbook,
    _inventory_path,
    accept_new_option,
    colour_option,
    forks_option,
    inventory_option,
    json_option,
    limit_option,
    startup_done,
    unattended_options,
    want_colour,
    workers_option,
)
from deploy.cli.connect import connection_options, dial_ahead, with_connection
from deploy.cli.runs import _delivery, _finish, _logging, _progress, _split
from deploy.errors import DeployError, InputError


@click.command(context_settings=CONTEXT)
@click.argument("playbook")
@inventory_option
@limit_option
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    metavar="NAME=VALUE",
    help="Variable, highest precedence (repeatable; @file.yaml too).",
)
@click.option(
    "-C", "--check", is_flag=True, help="Show what would change (unified diff) and touch nothing."
)
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="With --check: exit 5 when some host would change (drift), 0 only when none would.",
)
@click.option(
    "-D", "--diff", "show_diff", is_flag=True, help="Show the diff of every changed file."
)
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (required without a terminal)."
)
@json_option
@click.option(
    "-t",
    "--tags",
    multiple=True,
    metavar="TAG",
    help="Only steps with one of these tags (comma-separated or repeated).",
)
@click.option(
    "--skip-tags", multiple=True, metavar="TAG", help="Skip steps with any of these tags."
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More detail, the libraries' warnings included (-vv: also the commands run).",
)
@click.option(
    "--list-hosts", is_flag=True, help="Print the hosts the run would touch; connect to none."
)
@click.option(
    "--list-tasks", is_flag=True, help="Print the steps that would run; connect to no host."
)
@colour_option
@accept_new_option
@connection_options
@forks_option
@workers_option
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
    detailed_exitcode: bool,
    show_diff: bool,
    yes: bool,
    as_json: bool,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    verbose: int,
    list_hosts: bool,
    list_tasks: bool,
    color: str,
    accept_new_host_keys: bool,
    forks: int,
    workers: int | None,
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
    from deploy.config import inventory_file
    from deploy.engine.runid import new_run_id

    _logging(verbose)
    inventory_path = _inventory_path(inventory)
    run_id = new_run_id()
    out = _delivery(f"apply {playbook}", run_id, report_file, log_file, notify_url)
    interactive = sys.stdin.isatty() and not as_json
    try:
        inv = inventory_file.load_inventory(inventory_path)
        path = _find_playbook(playbook, inventory_path)
        from deploy.engine import local_lock
        from deploy.engine.holder import holder_info
        from deploy.engine.prepare import prepare

        prepared = prepare(
            path,
            inventory=inventory_path,
            loaded_inventory=inv,
            limit=limit,
            extra_vars=extra,
            tags=sorted(_split(tags) or ()),
            skip_tags=sorted(_split(skip_tags) or ()),
            serial=serial,
            max_fail=max_fail,
        )
        pb, plans = prepared.playbook, prepared.plans
        if detailed_exitcode and not check:
            raise InputError("--detailed-exitcode needs --check (it reports pending changes)")
        if list_hosts or list_tasks:
            click.echo(_listing(pb.playbook.name, plans, hosts=list_hosts, tasks=list_tasks))
            sys.exit(0)
        # The secrets (--ask-pass, -K) are asked for only by a command that will log in.
        plans = prepared.plans = with_connection(plans)
        if not check and not yes and not interactive:
            raise InputError(
                "refusing to change hosts without confirmation: pass --yes (no terminal to ask on)"
            )
        if not check:  # held until this process ends, however it ends
            local_lock.acquire(
                pb.path, inventory_path, holder_info(run_id, pb.playbook.name), wait=wait_lock
            )
        # Everything that can refuse the run has passed: the first hosts' TCP connects go now,
        # and overlap the import of the SSH stack and the engine below (deploy.remote.dial).
        # Without --yes the hosts are first opened by the preview, a --check run.
        dial_ahead(prepared.first_wave(forks, workers, check=check or not yes))
    except DeployError as exc:
        _fail(exc, out)
    from deploy import api
    from deploy.cli.interrupts import interruptible, record_start
    from deploy.engine.fleet import Listeners
    from deploy.engine.run_options import Cancel
    from deploy.remote import dial

    startup_done()
    name = pb.playbook.name
    colour = want_colour(color, sys.stdout)
    progress = Listeners(_progress(as_json, verbose, color=color, steps=not check), out.log_file)
    connection: dict[str, Any] = {
        "accept_new_host_keys": accept_new_host_keys,
        "force": force,
        "forks": forks,
        "workers": workers,
    }
    if not check and not yes:
        preview = api.execute(prepared, check=True, **connection)
        dial.discard()  # a host the preview did not reach: the run connects anew
        from deploy.report.human import render_plan

        click.echo(render_plan(preview, colour=colour), color=colour)
        if all(
            h.outcome in ("unchanged", "not attempted") and not h.recovered for h in preview.hosts
        ):
            click.echo("\nNothing to change.")
            _finish(
                preview,
                as_json=False,
                show_diff=False,
                record=False,
                out=out,
                color=color,
                details=False,
            )
        from deploy.cli.interrupts import confirmed

        if not confirmed("\nApply these changes?"):
            click.echo("Nothing was changed.")
            sys.exit(0)
    cancel = Cancel()
    if not check:
        interruptible(cancel, run_id, name)
    run = api.execute(
        prepared,
        check=check,
        run_id=run_id,
        timeout=timeout,
        progress=progress,
        cancel=cancel,
        on_start=record_start,
        **connection,
    )
    dial.discard()
    run.detailed_exitcode = detailed_exitcode
    if check and not as_json:
        from deploy.report.human import render_plan

        click.echo(render_plan(run, colour=colour), color=colour)
    # --check: the plan above showed every step, diff and error; the summary adds the table.
    # Otherwise the progress lines said each error as it happened.
    _finish(
        run,
        as_json=as_json,
        show_diff=show_diff and not check,
        record=not check,
        out=out,
        color=color,
        details=not check,
        errors=as_json,
        verbose=verbose,
    )


def _listing(playbook: str, plans: list[Any], *, hosts: bool, tasks: bool) -> str:
    """``--list-hosts`` / ``--list-tasks``, Ansible's layout: what would run, from input alone."""
    from deploy.steps import build_step

    lines = [f"playbook: {playbook}"]
    if hosts:
        lines.append(f"  hosts ({len(plans)}):")
        lines.extend(f"    {plan.name}" for plan in plans)
    if tasks:
        seen: dict[tuple[int, str], list[str]] = {}
        for plan in plans:
            for index, entry in plan.steps:
                step = build_step(entry, index)
                tags = f"  TAGS: [{', '.join(entry.tags)}]" if entry.tags else ""
                seen.setdefault((index, f"{index + 1}. {step.title}{tags}"), []).append(plan.name)
        lines.append("  tasks:")
        for (_, line), names in sorted(seen.items()):
            only = "" if len(names) == len(plans) else f"  (only {', '.join(names)})"
            lines.append(f"    {line}{only}")
    return "\n".join(lines)
