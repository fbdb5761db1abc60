"""``deploy history``, ``show`` and ``status``: what ran, and where each host stands. They
change nothing.
"""

from __future__ import annotations

import click

from deploy.cli.common import (
    CONTEXT,
    _fail,
    _inventory_path,
    accept_new_option,
    end_process,
    forks_option,
    inventory_option,
    json_option,
    limit_option,
    startup_done,
)
from deploy.cli.connect import connection_options, with_connection
from deploy.errors import InputError


@click.command(context_settings=CONTEXT)
@click.option("--host", metavar="NAME", help="Only runs that involved this host.")
@inventory_option
@click.option("--all", "every", is_flag=True, help="Runs of every inventory, not only this one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("-n", "--last", type=int, default=20, show_default=True, help="How many runs.")
def history(host: str | None, inventory: str | None, every: bool, as_json: bool, last: int) -> None:
    """What ran where, when, with what outcome: the current inventory's runs (from this
    workstation's records; --all for every inventory's)."""
    import json

    from deploy.engine import history as store
    from deploy.report.records import render_history

    inventory_path = None if every else _inventory_path(inventory)
    runs = store.load_all(host, inventory=inventory_path)[-last:]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in runs], indent=2, sort_keys=True))
    elif not runs and inventory_path is not None:
        click.echo(
            f"no runs recorded for {host + ' in ' if host else ''}{inventory_path} "
            "(--all: every inventory's)"
        )
    else:
        click.echo(render_history(runs, host))
    end_process(0)


@click.command(context_settings=CONTEXT)
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(run_id: str, as_json: bool) -> None:
    """Show one recorded run in full (RUN_ID may be any unique prefix of it)."""
    import json

    from deploy.engine import history as store
    from deploy.report.human import render_summary

    try:
        run = store.load(run_id)
    except InputError as exc:
        _fail(exc)
    if run is None:
        _fail(InputError(f"no recorded run {run_id} (see `deploy history`)"))
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2, sort_keys=True))
    else:
        click.echo(render_summary(run, diffs=True, verbose=True))
    end_process(0)


@click.command(context_settings=CONTEXT)
@inventory_option
@limit_option
@json_option
@accept_new_option
@connection_options
@forks_option
def status(
    inventory: str | None,
    limit: tuple[str, ...],
    as_json: bool,
    accept_new_host_keys: bool,
    forks: int,
) -> None:
    """Per host: lock holder, last run, unfinished runs, service health. Changes nothing.

    Reads each host's state directory without taking its lock, so it never gets in the way
    of a run. Exit 4 if some host could not be looked at, else 0.
    """
    import json

    from deploy.config import load

    try:
        inv = load.load_inventory(_inventory_path(inventory))
        hosts = load.resolve_hosts(inv, limit=list(limit) or None)
        hosts = with_connection(hosts)
    except InputError as exc:
        _fail(exc)
    from deploy.engine.status import exit_code, fleet_status, sglang_health
    from deploy.report.records import render_status

    startup_done()
    statuses = fleet_status(
        hosts,
        forks=forks,
        accept_new=accept_new_host_keys,
        health=sglang_health,
    )
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in statuses], indent=2, sort_keys=True))
    else:
        click.echo(render_status(statuses))
    end_process(exit_code(statuses))
