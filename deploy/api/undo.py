"""`rollback`: which run to undo and where (`rollback_target`), and the undo (`undo`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.api.token import CancelToken
from deploy.config.inventory import HostSpec
from deploy.config.locate import inventory_path
from deploy.engine.results import RunResult
from deploy.engine.run_options import Cancel, HostOpener, ssh_host


def rollback_target(
    run_id: str | None,
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
) -> Any:
    """The run to undo (``run_id``, or the inventory's latest apply) and the hosts to undo it
    on: a `deploy.engine.rollback_target.RollbackTarget`. Contacts no host.

    Raises:
        InputError: a bad inventory or ``limit``, or an ambiguous run id.
    """
    from deploy.config import load
    from deploy.engine import rollback_target as target
    from deploy.errors import InputError

    path = inventory_path(inventory)
    inv = load.load_inventory(path)
    hosts = load.resolve_hosts(inv, limit=list(limit) if limit else None)
    if not hosts:
        raise InputError("no host matches --limit")
    return target.choose(run_id, str(path.resolve()), hosts)


def undo(
    target: Any,
    *,
    inventory: Path,
    run_id: str | None = None,
    force: bool = False,
    forks: int = 10,
    timeout: float | None = None,
    accept_new_host_keys: bool = False,
    progress: Any = None,
    cancel: Cancel | None = None,
    open_host: HostOpener = ssh_host,
    workers: int | None = None,
) -> RunResult:
    """Undo a `rollback_target` on its hosts; the report (history is the caller's)."""
    from deploy.engine.fleet import run_rollback
    from deploy.engine.runid import new_run_id

    hosts: list[tuple[str, HostSpec]] = list(target.hosts)
    run = run_rollback(
        hosts,
        run_id=run_id or new_run_id(),
        target_run=target.run_id,
        force=force,
        accept_new_host_keys=accept_new_host_keys,
        forks=forks,
        timeout=timeout,
        playbook=target.recorded.playbook if target.recorded else None,
        progress=progress,
        open_host=open_host,
        halt=cancel,
        workers=workers,
    )
    run.inventory = str(inventory.resolve())
    return run


def rollback(
    run_id: str | None = None,
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
    force: bool = False,
    forks: int = 10,
    timeout: float | None = None,
    accept_new_host_keys: bool = False,
    progress: Any = None,
    cancel: CancelToken | None = None,
    workers: int | None = None,
) -> RunResult:
    """``deploy rollback [RUN_ID] --yes``: undo one run (default: the inventory's latest
    apply) on every host it touched, files and services; the report, recorded in the history.

    With nothing to undo the report has no hosts and ``stopped`` says why (exit code 0).

    Raises:
        InputError: a bad inventory or ``limit``, or an ambiguous run id.
    """
    from deploy.engine import history
    from deploy.engine.results import RunResult as Report
    from deploy.engine.runid import new_run_id

    path = inventory_path(inventory)
    target = rollback_target(run_id, inventory=path, limit=limit)
    new_id = new_run_id()
    if target.run_id is None or not target.hosts:
        from datetime import UTC, datetime

        why = (
            f"no apply of {path} is recorded on this workstation"
            if target.run_id is None
            else f"run {target.run_id} left no change on these hosts"
        )
        empty = Report(new_id, "rollback", None, datetime.now(UTC).isoformat(timespec="seconds"))
        empty.target_run, empty.stopped, empty.inventory = (
            target.run_id,
            f"nothing to roll back: {why}",
            str(path.resolve()),
        )
        return empty
    run = undo(
        target,
        inventory=path,
        run_id=new_id,
        force=force,
        forks=forks,
        timeout=timeout,
        accept_new_host_keys=accept_new_host_keys,
        progress=progress,
        cancel=cancel,
        workers=workers,
    )
    history.save(run)
    return run
