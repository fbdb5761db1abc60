"""Running a playbook (or a rollback) on many hosts: in parallel, in batches, within a deadline.

One slow or dead host never blocks the others: every host has its own thread, connection and
outcome, and the run's exit code is decided once, from all of them (`RunResult.exit_code`).
With many hosts busy at once on a multi-core workstation (or ``--workers N``), the hosts'
threads are spread over several processes, the decisions staying here (`deploy.engine.workers`).

Pacing (`deploy.engine.batches`): with ``serial`` the hosts run batch after batch, up to
``forks`` at a time within a batch; a batch with more failed hosts than ``max_fail`` allows
calls off the batches after it, whose hosts are reported "skipped" and never contacted.

Deadline and interrupts: when ``timeout`` expires, or the CLI sees SIGINT or SIGTERM, the
run's `Cancel` is set: no host or batch starts after it, and each busy host starts no new step
and rolls back what it changed, as if its next step had failed (progress says so). The report
and history are then written as for any run: exit 1 when every host is back as it was, else 3.
A second signal abandons at once (the CLI's handler): the hosts left mid-run keep an
unfinished journal, which the next ``apply`` or ``rollback`` there undoes first.
``deploy rollback`` under ``--timeout`` still abandons a host that is busy after a grace period
(a tenth of the timeout, 1 to 30 s): an undo is not interrupted half-way by another undo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from deploy import interrupt, trace
from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.engine import shards
from deploy.engine.batches import Size, exceeds, failed, plan_batches
from deploy.engine.host_jobs import ApplyJob, RollbackJob, guarded
from deploy.engine.host_run import apply_host
from deploy.engine.journal import now_precise
from deploy.engine.listeners import Listener, Listeners, Tracker
from deploy.engine.results import HostResult, RunResult
from deploy.engine.run_options import Cancel, HostOpener, RunOptions, ssh_host

__all__ = ["Listeners", "run_apply", "run_rollback"]

log = logging.getLogger("deploy.engine")


@dataclasses.dataclass
class _Deadline:
    timeout: float | None
    at: float | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None:
            self.at = time.monotonic() + self.timeout

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    @property
    def grace(self) -> float:
        return 0.0 if self.timeout is None else min(30.0, max(1.0, self.timeout / 10))


def _in_parallel(
    names: Sequence[str],
    work: Callable[[int], HostResult],
    forks: int,
    deadline: _Deadline,
    cancel: Cancel | None = None,
    halt: Cancel | None = None,
) -> tuple[dict[int, HostResult], set[int]]:
    """Run ``work(i)`` for every name on up to ``forks`` daemon threads.

    Returns the results that came back, by index, and the indexes that were started. With
    ``cancel`` (an apply), the deadline or a signal sets it: no host starts after that, and
    the busy ones are waited for — they start no new step and roll back what they changed
    (`deploy.engine.host_run.Cancel`). Without it (a rollback), the deadline abandons busy
    hosts after a grace period: a started index without a result. Daemon threads, not a
    ThreadPoolExecutor, because the executor joins its threads at exit: an abandoned host
    would hold the process, and the run would hang exactly when it must not. ``halt`` (a
    rollback's signal) only stops hosts from starting. Each host's thread watches ``cancel``:
    its waits end when it is set (`deploy.interrupt`).
    """
    results: dict[int, HostResult] = {}
    started: set[int] = set()
    pending = deque(range(len(names)))
    cond = threading.Condition()
    state = {"closed": False, "active": min(forks, len(names))}

    def worker() -> None:
        try:
            while True:
                with cond:
                    if state["closed"] or not pending:
                        return
                    index = pending.popleft()
                    started.add(index)
                with interrupt.watched(cancel):
                    result = guarded(names[index], partial(work, index))
                with cond:
                    results[index] = result
                    cond.notify_all()
        finally:
            with cond:
                state["active"] -= 1
                cond.notify_all()

    for number in range(state["active"]):
        threading.Thread(target=worker, name=f"host-{number}", daemon=True).start()
    with cond:
        while not cond.wait_for(
            lambda: state["active"] == 0, timeout=_tick(deadline, cancel or halt)
        ):
            if halt is not None and halt.is_set():
                state["closed"] = True
            if cancel is not None:
                if deadline.expired:
                    cancel.set(f"--timeout {deadline.timeout:g} s expired")
                if cancel.is_set():
                    state["closed"] = True
                continue
            if deadline.expired:
                state["closed"] = True
                cond.wait_for(lambda: started <= results.keys(), timeout=deadline.grace)
                break
        return dict(results), set(started)


def _tick(deadline: _Deadline, cancel: Cancel | None) -> float | None:
    """How long the fleet sleeps between looks at the deadline and the cancel flag."""
    remaining = deadline.remaining()
    if cancel is None:
        return remaining
    return 0.2 if remaining is None else min(0.2, max(remaining, 0.01))


@contextlib.contextmanager
def _runner(
    job: ApplyJob | RollbackJob,
    busy: int,
    workers: int | None,
    sink: Listener,
    cancel: Cancel | None,
    local: Callable[[Any], HostResult],
) -> Iterator[Callable[[Any], HostResult]]:
    """How a host is run: ``local`` (on this process's thread), or by worker processes when
    `deploy.engine.shards.worker_count` says so."""
    count = shards.worker_count(
        workers, busy, cores=shards.cores(), shardable=job.open_host is ssh_host
    )
    if count < 2:
        yield local
        return
    from deploy.engine.workers import Pool

    log.info("running the hosts in %d processes", count)
    with Pool(count, job, sink, cancel, local) as pool:
        yield lambda host: pool.run(host, job.name(host))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "?"


def _new_run(run_id: str, command: str, playbook: str | None, check: bool) -> RunResult:
    return RunResult(
        run_id=run_id,
        command=command,
        playbook=playbook,
        started=now_precise(),
        check_mode=check,
        user=_user(),
        argv=sys.argv[1:],
    )


def _settle(
    names: Sequence[str],
    got: dict[int, HostResult],
    started: set[int],
    tracker: Tracker | None,
    timeout: float | None,
    doing: str = "before its first step",
) -> list[HostResult | None]:
    """Results in order; a started host without one is "interrupted", others stay None."""
    out: list[HostResult | None] = []
    for index, name in enumerate(names):
        if index in got:
            out.append(got[index])
        elif index in started:
            where = (tracker.current.get(name) if tracker else None) or doing
            out.append(
                HostResult(
                    host=name,
                    outcome="interrupted",
                    error=f"--timeout {timeout:g} s expired {where}; "
                    "deploy stopped waiting and undid nothing now: anything changed is in the "
                    "host's journal, and the next `deploy apply` or `deploy rollback` there "
                    "undoes it first (`deploy status` shows it)",
                )
            )
        else:
            out.append(None)
    return out


@trace.spanned("engine.run_apply")
def run_apply(
    hosts: list[HostPlan],
    options: RunOptions,
    *,
    forks: int = 10,
    serial: Sequence[Size] | None = None,
    max_fail: Size | None = None,
    timeout: float | None = None,
    workers: int | None = None,
) -> RunResult:
    """Apply each host's steps, batch by batch; results in inventory order.

    ``serial`` is ignored under ``--check`` (nothing changes, so every host is planned at
    once). ``max_fail`` defaults to 0 when there are batches. ``workers``: processes to run
    the hosts in (`deploy.engine.shards`; None: chosen, 1: this one).
    """
    began = time.monotonic()
    deadline = _Deadline(timeout)
    tracker = Tracker(options.progress)
    options = dataclasses.replace(options, progress=tracker)
    run = _new_run(
        options.run_id,
        "check" if options.check_mode else "apply",
        options.playbook,
        options.check_mode,
    )
    names = [h.name for h in hosts]
    run.inventory = options.inventory
    if options.on_start is not None and not options.check_mode:
        run.hosts = [_unrecorded(name) for name in names]
        options.on_start(run)
        run.hosts = []
    plan_of = {h.name: h for h in hosts}
    batches = plan_batches(names, None if options.check_mode else serial)
    if serial and not options.check_mode:
        run.batches = batches
    limit = max_fail or Size(0)
    results: dict[str, HostResult] = {}
    local = partial(apply_host, options=options)
    busy = shards.busy_at_once(forks, [len(batch) for batch in batches])
    with _runner(ApplyJob.of(options), busy, workers, tracker, options.cancel, local) as run_host:
        for number, batch in enumerate(batches, 1):
            if deadline.expired:
                run.stopped = (
                    f"--timeout {timeout:g} s expired before batch {number} of {len(batches)}"
                )
                break
            if options.cancel.is_set():
                run.stopped = f"{options.cancel.reason} before batch {number} of {len(batches)}"
                break
            if len(batches) > 1:
                tracker.run_event(f"batch {number} of {len(batches)}: {', '.join(batch)}")
            plans = [plan_of[name] for name in batch]

            def one(i: int, plans: list[HostPlan] = plans) -> HostResult:
                return run_host(plans[i])

            got, started = _in_parallel(batch, one, forks, deadline, options.cancel)
            for result in _settle(batch, got, started, tracker, timeout):
                if result is not None:
                    results[result.host] = result
            if options.cancel.is_set() and not options.check_mode:
                run.stopped = f"{options.cancel.reason} during batch {number} of {len(batches)}"
                tracker.run_event(run.stopped)
                break
            if len(results) < len(names) and deadline.expired:
                run.stopped = (
                    f"--timeout {timeout:g} s expired during batch {number} of {len(batches)}"
                )
                tracker.run_event(run.stopped)
                break
            failures = sum(1 for name in batch if name in results and failed(results[name]))
            if number < len(batches) and exceeds(failures, len(batch), limit):
                run.stopped = (
                    f"batch {number} of {len(batches)}: {failures} of {len(batch)} host(s) failed, "
                    f"more than max_fail {limit} allows; the remaining batches were not started"
                )
                tracker.run_event(run.stopped)
                break
    run.hosts = [results.get(name) or _skipped(name, run.stopped) for name in names]
    run.duration = round(time.monotonic() - began, 3)
    return run


def _unrecorded(name: str) -> HostResult:
    """What history says of a host until the run records its outcome (a killed run stays so)."""
    return HostResult(
        host=name,
        outcome="interrupted",
        error="deploy ended before this host's outcome was recorded (killed?): its journal "
        "says what changed; `deploy status` shows it, `deploy rollback` undoes it",
    )


def _skipped(name: str, why: str | None) -> HostResult:
    return HostResult(host=name, outcome="skipped", error=f"never touched: {why or 'not started'}")


def run_rollback(
    hosts: list[tuple[str, HostSpec]],
    *,
    run_id: str,
    target_run: str,
    force: bool,
    accept_new_host_keys: bool = False,
    forks: int = 10,
    timeout: float | None = None,
    playbook: str | None = None,
    progress: Any = None,
    open_host: HostOpener = ssh_host,
    halt: Cancel | None = None,
    workers: int | None = None,
) -> RunResult:
    """Undo ``target_run`` on every host given (those the run touched).

    ``progress`` (e.g. `deploy.report.human.ProgressPrinter`) hears each host's notes; one
    with ``busy``/``idle`` also keeps a heartbeat for the host while it works. ``halt`` (the
    first SIGINT/SIGTERM, `deploy.cli.interrupts`): no host starts after it; a host being
    undone finishes its undo (its ``busy`` set names it for a second signal's message), and
    the hosts never started are reported skipped. ``workers`` as for `run_apply`.
    """
    began = time.monotonic()
    deadline = _Deadline(timeout)
    run = _new_run(run_id, "rollback", playbook, False)
    run.target_run = target_run

    job = RollbackJob(run_id, target_run, force, accept_new_host_keys, open_host)
    local = partial(job.run, progress=progress, halt=halt)
    names = [h[0] for h in hosts]
    busy = shards.busy_at_once(forks, [len(hosts)])
    with _runner(job, busy, workers, progress, halt, local) as run_host:
        got, started = _in_parallel(names, lambda i: run_host(hosts[i]), forks, deadline, halt=halt)
    settled = _settle(names, got, started, None, timeout, "while rolling back")
    if halt is not None and halt.is_set():
        run.stopped = f"{halt.reason}: no host started after it"
    elif any(result is None for result in settled):
        run.stopped = f"--timeout {timeout:g} s expired before every host was started"
    run.hosts = [r or _skipped(n, run.stopped) for n, r in zip(names, settled, strict=True)]
    run.duration = round(time.monotonic() - began, 3)
    return run
