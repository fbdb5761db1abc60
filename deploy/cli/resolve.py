"""``deploy resolve RUN``: record that a human brought a host back after a failed undo."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from deploy.cli.common import (
    CONTEXT,
    _fail,
    _inventory_path,
    accept_new_option,
    end_process,
    inventory_option,
    limit_option,
)
from deploy.cli.connect import connection_options, with_connection
from deploy.errors import DeployError, InputError

if TYPE_CHECKING:
    from deploy.config.inventory import HostSpec


@click.command(context_settings=CONTEXT)
@click.argument("run_id")
@click.option("-m", "--message", "why", metavar="WHY", default="", help="Why, in your words.")
@inventory_option
@limit_option
@click.option(
    "--yes", "-y", is_flag=True, help="Do not ask for confirmation (required without a terminal)."
)
@accept_new_option
@connection_options
def resolve(
    run_id: str,
    why: str,
    inventory: str | None,
    limit: tuple[str, ...],
    yes: bool,
    accept_new_host_keys: bool,
) -> None:
    """Close RUN on the hosts where its undo failed, once you have brought them back by hand.

    Reads each host first and shows what it finds (each file the run wrote with its sha256,
    and whether that is the content from before the run; what serves each service it
    touched, and whether it is healthy), then asks. Confirmed, it records on the host who,
    when and why, and the run no longer blocks `deploy apply` and `deploy rollback` there.
    Nothing else is changed. Exit 0: recorded (or nothing to resolve); 2: no such run;
    4: a host could not be read or locked (nothing recorded there).
    """
    from deploy.config import load
    from deploy.engine import history
    from deploy.engine import resolve as engine
    from deploy.engine.rollback_target import TOUCHED
    from deploy.engine.run_options import holder_info, ssh_host
    from deploy.engine.runid import check_run_id, is_full_run_id, new_run_id

    try:
        check_run_id(run_id)
        recorded = history.load(run_id)
        if recorded is None and not is_full_run_id(run_id):
            raise InputError(
                f"no recorded run {run_id} (see `deploy history`; a run kept only on the "
                "hosts is named in full, as `deploy status` lists it)"
            )
        run_id = recorded.run_id if recorded is not None else run_id
        inv = load.load_inventory(_inventory_path(inventory))
        hosts = load.resolve_hosts(inv, limit=list(limit) or None)
        if recorded is not None:
            touched = {h.host for h in recorded.hosts if h.outcome in TOUCHED}
            hosts = [(name, spec) for name, spec in hosts if name in touched]
        if not hosts:
            raise InputError(f"run {run_id} touched no host of this inventory (or --limit)")
        if not yes and not sys.stdin.isatty():
            raise InputError("refusing to resolve without confirmation: pass --yes")
        hosts = with_connection(hosts)
    except InputError as exc:
        _fail(exc)
    opener = ssh_host

    def inspect(name: str, spec: HostSpec) -> engine.Findings:
        remote = opener(name, spec, accept_new_host_keys)
        try:
            return engine.inspect(remote, spec.state_dir, run_id)
        finally:
            remote.close()

    findings = [(name, spec, inspect(name, spec)) for name, spec in hosts]
    if all(found.state == "absent" for _, _, found in findings):
        _fail(InputError(f"no run {run_id} on {', '.join(n for n, _ in hosts)}"))
    unreachable = False
    for name, _, found in findings:
        if found.resolvable:
            what = "its undo failed" if found.state == "undo failed" else f"it is {found.state}"
            click.echo(f"{name}: run {run_id}: {what}; the host now:")
            for line in found.lines or ["(the run changed nothing deploy can read)"]:
                click.echo(f"  {line}")
        elif found.error and found.state != "absent":
            unreachable = True
            click.echo(f"{name}: {found.error}")
        elif found.state != "absent":
            click.echo(f"{name}: nothing to resolve: run {run_id} is {found.state}")
    chosen = [(name, spec, found) for name, spec, found in findings if found.resolvable]
    if not chosen:
        end_process(4 if unreachable else 0)
    names = ", ".join(name for name, _, _ in chosen)
    question = f"Record that a human brought {names} back, closing run {run_id} there?"
    from deploy.cli.interrupts import confirmed

    if not yes and not confirmed(question):
        click.echo("Nothing was changed.")
        end_process(0)
    holder = holder_info(new_run_id(), "resolve")
    for name, spec, found in chosen:
        remote = opener(name, spec, accept_new_host_keys)
        try:
            remote.open()
            line = engine.record(
                remote, spec.state_dir, run_id, why=why, found=found, holder=holder
            )
            click.echo(line + (f": {why}" if why else ""))
        except DeployError as exc:
            unreachable = True
            click.echo(f"{name}: nothing recorded: {exc}")
        finally:
            remote.close()
    end_process(4 if unreachable else 0)
