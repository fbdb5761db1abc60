"""deploy as a library: ``from deploy import plan, apply, rollback``.

Each call does what the command of the same name does and returns the run's report, the
`deploy.engine.results.RunResult` whose ``to_dict()`` is the document ``--json`` prints
(described by `deploy.report.json_schema`); ``report.exit_code`` is the command's exit code.
Invalid input raises `deploy.errors.InputError` (nothing touched); another run of the same
playbook and inventory holding the workstation's lock raises `deploy.engine.local_lock.RunLocked`.
Everything that happens on a host is in the report, never raised.

No click and no terminal: nothing is printed or asked. A secret comes from the inventory's
``*_env`` variables (``password_env``, ``become_password_env``), never from a prompt. Progress
goes to the ``progress`` object given (the engine's `deploy.engine.host_run.Progress`:
``host_event``, ``step_started``, ``step_finished``), if any.

Cancellation is the caller's `CancelToken`, not a signal handler (a library cannot install
one off the main thread, and must not take the process's Ctrl-C from its host program):
``token.cancel()`` from any thread makes the run start no new step, and roll back every host
in the middle of its changes, as a failure does; hosts not started are skipped. The report
then says ``cancelled by the caller`` (or the reason given).

Safe to call from a thread, and from several at once on different playbooks or inventories:
a call keeps its state in its own objects; the workstation's lock per playbook and inventory
is held for the call and released when it returns, however it returns. The CLI
(`deploy.cli.apply`, `deploy.cli.rollback`) is a layer over these functions: it adds the
options, the prompts, signals, the output and the exit code.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.config.inventory import HostSpec
from deploy.config.locate import find_playbook, inventory_path
from deploy.engine.results import RunResult
from deploy.engine.run_options import Cancel, HostOpener, ssh_host

__all__ = ["CancelToken", "Prepared", "apply", "plan", "prepare", "rollback"]


class CancelToken(Cancel):
    """Cancels a running `apply`, `plan` or `rollback` from any thread (``cancel()``).

    Hosts start no new step, and a host in the middle of its changes is rolled back as if its
    next step had failed; a wait inside a step ends with that step. A token cancels one call.
    """

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        self.set(reason)

    @property
    def cancelled(self) -> bool:
        return self.is_set()


def _extra_vars(value: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """``-e`` as a mapping, or as the command line's items (``KEY=VALUE``, ``@FILE``)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    from deploy.config import load

    return dict(load.parse_extra_vars(list(value)))


@dataclass
class Prepared:
    """A validated run, before any host is contacted: what `apply` and the CLI both run."""

    inventory: Path
    playbook: Any  # deploy.config.load.LoadedPlaybook
    plans: list[Any]  # deploy.config.resolve.HostPlan, one per selected host
    serial: Any = None
    max_fail: Any = None

    @property
    def name(self) -> str:
        return str(self.playbook.playbook.name)


def prepare(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    skip_tags: Sequence[str] | None = None,
    serial: str | None = None,
    max_fail: str | None = None,
    loaded_inventory: Any = None,
) -> Prepared:
    """Load and check the inventory and the playbook; contacts no host.

    Raises:
        InputError: the first problem, as ``file:line:col field: message``.
    """
    from deploy.config import inventory_file, load
    from deploy.engine import batches
    from deploy.errors import InputError

    path = inventory_path(inventory)
    inv = loaded_inventory or inventory_file.load_inventory(path)
    pb = load.load_playbook(find_playbook(playbook, path))
    plans = load.resolve(
        inv,
        pb,
        extra_vars=_extra_vars(extra_vars),
        limit=list(limit) if limit else None,
        tags=set(tags) if tags else None,
        skip_tags=set(skip_tags) if skip_tags else None,
    )
    if not plans:
        raise InputError("no host matches the playbook's hosts and --limit")
    sizes = serial if serial is not None else pb.playbook.serial
    fail = max_fail if max_fail is not None else pb.playbook.max_fail
    return Prepared(
        path,
        pb,
        plans,
        batches.parse_serial(sizes) if sizes is not None else None,
        batches.parse_max_fail(fail) if fail is not None else None,
    )


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
    open_host: HostOpener = ssh_host,
    on_start: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Run a `Prepared` playbook on its hosts (``check``: plan only) and return the report.

    The workstation's lock and the history are the caller's (`apply` takes and records them).
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
        cancel=cancel,
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
    )
    history.save(run)
    return run
