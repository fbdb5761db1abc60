"""``deploy rollback``: put back what a run changed, files and service."""

from __future__ import annotations

import sys
from pathlib import Path

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
    workers_option,
)
from deploy.cli.connect import connection_options, with_connection
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
@connection_options
@forks_option
@workers_option
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
    workers: int | None,
    color: str,
    timeout: float | None,
    report_file: Path | None,
    log_file: Path | None,
    notify_url: str | None,
) -> None:
    """Undo one run: RUN_ID, or the latest apply of this inventory, on every host it touched.

    A run with later runs still standing on a host is refused there (they are listed: roll
    them back first, newest first). A retry after a partial failure finishes the same run.
    """
    from deploy import api
    from deploy.config import load
    from deploy.engine import rollback_target
    from deploy.engine.runid import new_run_id

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
        hosts = with_connection(hosts)  # asks for --ask-pass/-K: only once the input is good
        target = rollback_target.choose(run_id, str(inventory_path.resolve()), hosts)
    except InputError as exc:
        _fail(exc, out)

    startup_done()
    if target.run_id is None:
        click.echo(
            f"Nothing to roll back: no apply of {inventory_path} is recorded on this "
            "workstation. To undo a run kept on the hosts, name it: `deploy rollback RUN_ID` "
            "(`deploy status` lists them)."
        )
        sys.exit(0)
    if not target.hosts:
        where = ", ".join(name for name, _ in hosts)
        click.echo(f"Nothing to roll back: run {target.run_id} left no change on {where}.")
        sys.exit(0)
    # The one place the prompt is made (`render_rollback_question`): run, playbook, start,
    # hosts, files and the services it will restart, fitted to the terminal.
    from deploy.cli.interrupts import confirmed, interruptible
    from deploy.engine.run_options import Cancel
    from deploy.report.records import render_rollback_question

    if not yes and not confirmed(render_rollback_question(target)):
        click.echo("Nothing was changed.")
        sys.exit(0)
    halt = Cancel()  # as apply's: the first signal starts no new host, a second abandons
    interruptible(halt, new_id, "rollback", undoing=target.run_id)
    run = api.undo(
        target,
        inventory=inventory_path,
        run_id=new_id,
        force=force,
        accept_new_host_keys=accept_new_host_keys,
        forks=forks,
        workers=workers,
        timeout=timeout,
        # Every 5 s, like apply's wait: restarting the old server may take 45 minutes.
        progress=_progress(as_json, 0, color=color, heartbeat=5.0),
        cancel=halt,
    )
    absent = f"no run {target.run_id} on this host"
    if target.recorded is None and all(h.error == absent for h in run.hosts):
        # Named in full, recorded nowhere and on no host: a typo, as `show` says (exit 2).
        where = ", ".join(h.host for h in run.hosts)
        _fail(InputError(f"no run {target.run_id} on {where} nor in `deploy history`"), out)
    _finish(run, as_json=as_json, show_diff=False, record=True, out=out)
