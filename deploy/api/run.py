"""`plan` and `apply`: load and check the input (`prepare`), run it (`execute`), with the
workstation's lock and the history around a real run (see `deploy.api`)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deploy.api.token import CancelToken
from deploy.engine.prepare import Prepared as Prepared
from deploy.engine.prepare import prepare as prepare
from deploy.engine.results import RunResult
from deploy.engine.run_options import Cancel, HostOpener, ssh_host


def execute(
    prepared: Prepared,
    *,
    check: bool = False,
    run_id: str | None = None,
    forks: int = 10,
    timeout: float | None = None,
    accept_new_host_keys: bool = False,
    force: bool = False,
    progress: Any = None,
    cancel: Cancel | None = None,
    workers: int | None = None,
    open_host: HostOpener = ssh_host,
    on_start: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Run a `Prepared` playbook on its hosts (``check``: plan only) and return the report.

    The workstation's lock and the history are the caller's (`apply` takes and records them).
    ``workers``: processes the hosts run in (`deploy.engine.shards`; None: chosen, 1: one).
    """
    from deploy.engine.fleet import run_apply
    from deploy.engine.host_run import NoProgress, RunOptions
    from deploy.engine.runid import new_run_id

    options = RunOptions(
        run_id=run_id or new_run_id(),
        playbook=prepared.name,
        check_mode=check,
        accept_new_host_keys=accept_new_host_keys,
        progress=progress if progress is not None else NoProgress(),
        force=force,
        inventory=str(prepared.inventory.resolve()),
        on_start=on_start,
        cancel=cancel if cancel is not None else Cancel(),
        open_host=open_host,
    )
    run = run_apply(
        prepared.plans,
        options,
        forks=forks,
        serial=prepared.serial,
        max_fail=prepared.max_fail,
        timeout=timeout,
        workers=workers,
    )
    run.inventory = str(prepared.inventory.resolve())
    return run


def apply(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    skip_tags: Sequence[str] | None = None,
    check: bool = False,
    forks: int = 10,
    serial: str | None = None,
    max_fail: str | None = None,
    timeout: float | None = None,
    wait_lock: float = 0.0,
    accept_new_host_keys: bool = False,
    force: bool = False,
    progress: Any = None,
    cancel: CancelToken | None = None,
    workers: int | None = None,
) -> RunResult:
    """``deploy apply PLAYBOOK --yes`` (``check=True``: ``--check``): the run's report.

    A real run holds the workstation's lock of this playbook and inventory while it runs
    (``wait_lock``: seconds to wait for it) and is recorded in the history before it touches
    a host, so ``deploy rollback`` and `rollback` find it.

    Raises:
        InputError: invalid input; nothing was touched.
        RunLocked: another run of this playbook and inventory is in progress.
    """
    prepared = prepare(
        playbook,
        inventory=inventory,
        limit=limit,
        extra_vars=extra_vars,
        tags=tags,
        skip_tags=skip_tags,
        serial=serial,
        max_fail=max_fail,
    )
    options: dict[str, Any] = {
        "forks": forks,
        "timeout": timeout,
        "accept_new_host_keys": accept_new_host_keys,
        "force": force,
        "progress": progress,
        "cancel": cancel,
        "workers": workers,
    }
    if check:
        return execute(prepared, check=True, **options)
    from deploy.engine import history
    from deploy.engine.host_run import holder_info
    from deploy.engine.runid import new_run_id

    def record(run: RunResult) -> None:  # before any host is touched: a killed run is found
        history.save(run)

    run_id = new_run_id()
    lock = _lock(prepared, holder_info(run_id, prepared.name), wait_lock, cancel)
    if lock is None:  # cancelled while waiting for another run of this job: nothing touched
        return _untouched(prepared, run_id, cancel.reason if cancel is not None else "")
    with lock:
        run = execute(prepared, run_id=run_id, on_start=record, **options)
        history.save(run)
    return run


#: How often a wait for the workstation's lock looks at the caller's token.
_LOCK_POLL = 0.1


def _lock(prepared: Prepared, holder: dict[str, Any], wait: float, cancel: Cancel | None) -> Any:
    """The workstation's lock of this job, waiting up to ``wait`` seconds for another run of
    it to end; None when ``cancel`` is set while waiting (at once, not at the wait's end).

    Raises:
        RunLocked: still held after ``wait`` seconds.
    """
    from deploy.engine import local_lock

    deadline = time.monotonic() + max(0.0, wait)
    while True:
        remaining = deadline - time.monotonic()
        try:
            return local_lock.acquire(
                prepared.playbook.path, prepared.inventory, holder, wait=min(_LOCK_POLL, remaining)
            )
        except local_lock.RunLocked as exc:
            if cancel is not None and cancel.is_set():
                return None
            if remaining <= _LOCK_POLL:  # said as one wait of ``wait`` seconds, not the last poll
                text = re.sub(r"after waiting [\d.]+ s", f"after waiting {wait:g} s", str(exc))
                raise local_lock.RunLocked(text) from None


def _untouched(prepared: Prepared, run_id: str, reason: str) -> RunResult:
    """The report of a run cancelled before it began: every host skipped, exit 4."""
    from datetime import UTC, datetime

    from deploy.engine.results import HostResult

    return RunResult(
        run_id,
        "apply",
        prepared.name,
        datetime.now(UTC).isoformat(),
        hosts=[
            HostResult(p.name, "skipped", error=f"never touched: {reason}") for p in prepared.plans
        ],
        stopped=reason,
        inventory=str(prepared.inventory.resolve()),
    )


def plan(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    skip_tags: Sequence[str] | None = None,
    forks: int = 10,
    accept_new_host_keys: bool = False,
    progress: Any = None,
    cancel: CancelToken | None = None,
) -> RunResult:
    """``deploy apply PLAYBOOK --check``: what would change on each host, with diffs; touches
    nothing and is not recorded. ``report.pending`` names the hosts that would change."""
    return apply(
        playbook,
        inventory=inventory,
        limit=limit,
        extra_vars=extra_vars,
        tags=tags,
        skip_tags=skip_tags,
        check=True,
        forks=forks,
        accept_new_host_keys=accept_new_host_keys,
        progress=progress,
        cancel=cancel,
    )
