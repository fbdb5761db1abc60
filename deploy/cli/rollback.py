"""``deploy rollback``: put back what a run changed, files and service."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from deploy.cli.common import (
    CONTEXT,
    _fail,
    _inventory_path,
    accept_new_option,
    colour_option,
    forks_option,
    inventory_option,
    json_option,
    limit_option,
    startup_done,
    unattended_options,
)
from deploy.cli.runs import _delivery, _finish, _progress
from deploy.errors import InputError


@click.command(context_settings=CONTEXT)
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
@colour_option
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
    color: str,
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
        question = rollback_question([name for name, _ in hosts], run_id, inventory_path)
        if not click.confirm(question, default=False):
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
        # Every 5 s, like apply's wait: restarting the old server may take 45 minutes.
        progress=_progress(as_json, 0, color=color, heartbeat=5.0),
    )
    run.inventory = str(inventory_path.resolve())
    _finish(run, as_json=as_json, show_diff=False, record=True, out=out)


def rollback_question(names: list[str], run_id: str | None, inventory: Path) -> str:
    """The confirmation question: which run (id, playbook, when), its files and services, on
    which hosts — from this workstation's history (`deploy history`). The one place the prompt
    is made, so that how the run is chosen can change without touching the command.

    The hosts' journals decide what is undone; a run this workstation has no record of is
    named as "the last run not yet undone".
    """
    target = _recorded_target(names, run_id, inventory)
    where = ", ".join(names)
    if target is None:
        what = f"run {run_id}" if run_id else "the last run not yet undone"
        return f"Roll back {what} on {where}?"
    involved = [h for h in target.hosts if h.host in names and h.outcome == "changed"]
    files = sorted({path for h in involved for path in h.changed_files})
    services = sorted(
        {
            f"{step.kind}: {step.title}"
            for h in involved
            for step in h.steps
            if step.kind in ("restart", "start", "stop") and step.status in ("ok", "changed")
        }
    )
    lines = [
        f"Roll back run {target.run_id} ({target.playbook or '?'}, "
        f"{target.started.replace('+00:00', 'Z')}) on {where}?",
        *(f"  file back:   {path}" for path in files),
        *(
            f"  service:     {service} (the old server, its old command line)"
            for service in services
        ),
    ]
    return "\n".join(lines) + "\n"


def _recorded_target(names: list[str], run_id: str | None, inventory: Path) -> Any:
    """The run ``deploy rollback`` would undo, as recorded here, or None when unknown."""
    from deploy.engine import history as store
    from deploy.errors import InputError as Ambiguous

    if run_id is not None:
        try:
            return store.load(run_id)
        except Ambiguous:
            return None
    runs = store.load_all(inventory=inventory)
    undone = {
        h.run_id
        for run in runs
        if run.command == "rollback"
        for h in run.hosts
        if h.outcome == "restored"
    }
    for run in reversed(runs):
        if run.command != "apply" or run.check_mode or run.run_id in undone:
            continue
        if any(h.host in names and h.outcome == "changed" for h in run.hosts):
            return run
    return None
