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
    forks_option,
    inventory_option,
    json_option,
    limit_option,
    startup_done,
    unattended_options,
)
from deploy.cli.runs import _delivery, _finish
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
    run.inventory = str(inventory_path.resolve())
    _finish(run, as_json=as_json, show_diff=False, record=True, out=out)
