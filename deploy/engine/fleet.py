"""Running a playbook (or a rollback) on many hosts: in parallel, in batches, within a deadline.

One slow or dead host never blocks the others: every host has its own thread, connection and
outcome, and the run's exit code is decided once, from all of them (`RunResult.exit_code`).

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

import dataclasses
import getpass
import logging
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from deploy import interrupt, trace
from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.engine.batches import Size, exceeds, failed, plan_batches
from deploy.engine.host_run import apply_host
from deploy.engine.journal import now_precise
from deploy.engine.results import HostResult, RunResult, StepResult
from deploy.engine.rollback import rollback_host
from deploy.engine.run_options import Cancel, HostOpener, RunOptions, holder_info, ssh_host

log = logging.getLogger("deploy.engine")

#: Whatever listens to a run (`deploy.engine.host_run.Progress`), typed loosely so that
#: listeners may offer the optional ``run_event(message)`` too.
Listener = Any


class Listeners:
    """Several progress listeners as one (the terminal and the log file, say)."""

    def __init__(self, *listeners: Listener) -> None:
        self.listeners = [listener for listener in listeners if listener is not None]

    def host_event(self, host: str, message: str) -> None:
        for listener in self.listeners:
            listener.host_event(host, message)

    def step_started(self, host: str, index: int, title: str) -> None:
        for listener in self.listeners:
            listener.step_started(host, index, title)

    def step_finished(self, host: str, result: StepResult) -> None:
        for listener in self.listeners:
            listener.step_finished(host, result)

    def run_event(self, message: str) -> None:
        run_event(self.listeners, message)


def run_event(listeners: Sequence[Listener], message: str) -> None:
    """Tell listeners that know ``run_event`` about the run as a whole (batches, deadline)."""
    for listener in listeners:
        hook = getattr(listener, "run_event", None)
        if hook is not None:
            hook(message)


class _Tracker:
    """Remembers each host's current step, to say where a host was when the deadline hit."""

    def __init__(self, inner: Listener) -> None:
        self.inner = inner
        self.current: dict[str, str] = {}

    def host_event(self, host: str, message: str) -> None:
        self.inner.host_event(host, message)

    def step_started(self, host: str, index: int, title: str) -> None:
        self.current[host] = f"during step {index + 1} ({title})"
        self.inner.step_started(host, index, title)

    def step_finished(self, host: str, result: StepResult) -> None:
        self.current[host] = f"after step {result.index + 1} ({result.title}, {result.status})"
        self.inner.step_finished(host, result)

    def run_event(self, message: str) -> None:
        run_event([self.inner], message)


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
                    result = _guarded(names[index], work, index)
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


def _guarded(name: str, work: Callable[[int], HostResult], index: int) -> HostResult:
    """``work(index)``; an exception is a bug, reported as a host a human must look at."""
    try:
        return work(index)
    except Exception as exc:
        log.error("internal error on %s:\n%s", name, traceback.format_exc())
        return HostResult(
            host=name,
            outcome="rollback failed",
            error=f"internal error (a bug in deploy, please report it): {exc!r}; "
            "check the host: `deploy status` shows any unfinished run",
        )


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
    tracker: _Tracker | None,
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
) -> RunResult:
    """Apply each host's steps, batch by batch; results in inventory order.

    ``serial`` is ignored under ``--check`` (nothing changes, so every host is planned at
    once). ``max_fail`` defaults to 0 when there are batches.
    """
    began = time.monotonic()
    deadline = _Deadline(timeout)
    tracker = _Tracker(options.progress)
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
    for number, batch in enumerate(batches, 1):
        if deadline.expired:
            run.stopped = f"--timeout {timeout:g} s expired before batch {number} of {len(batches)}"
            break
        if options.cancel.is_set():
            run.stopped = f"{options.cancel.reason} before batch {number} of {len(batches)}"
            break
        if len(batches) > 1:
            tracker.run_event(f"batch {number} of {len(batches)}: {', '.join(batch)}")
        plans = [plan_of[name] for name in batch]

        def one(i: int, plans: list[HostPlan] = plans) -> HostResult:
            return apply_host(plans[i], options)

        got, started = _in_parallel(batch, one, forks, deadline, options.cancel)
        for result in _settle(batch, got, started, tracker, timeout):
            if result is not None:
                results[result.host] = result
        if options.cancel.is_set() and not options.check_mode:
            run.stopped = f"{options.cancel.reason} during batch {number} of {len(batches)}"
            tracker.run_event(run.stopped)
            break
        if len(results) < len(names) and deadline.expired:
            run.stopped = f"--timeout {timeout:g} s expired during batch {number} of {len(batches)}"
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
) -> RunResult:
    """Undo ``target_run`` on every host given (those the run touched).

    ``progress`` (e.g. `deploy.report.human.ProgressPrinter`) hears each host's notes; one
    with ``busy``/``idle`` also keeps a heartbeat for the host while it works. ``halt`` (the
    first SIGINT/SIGTERM, `deploy.cli.interrupts`): no host starts after it; a host being
    undone finishes its undo (its ``busy`` set names it for a second signal's message), and
    the hosts never started are reported skipped.
    """
    began = time.monotonic()
    deadline = _Deadline(timeout)
    run = _new_run(run_id, "rollback", playbook, False)
    run.target_run = target_run

    def work(i: int) -> HostResult:
        name, spec = hosts[i]
        if halt is not None and halt.is_set():
            return _skipped(name, halt.reason)
        remote = open_host(name, spec, accept_new_host_keys)
        note = None
        if progress is not None:
            note = partial(progress.host_event, name)
            getattr(progress, "busy", lambda *_: None)(name, "rollback")
        if halt is not None:
            halt.busy.add(name)
        try:
            return rollback_host(
                remote,
                spec.state_dir,
                target_run,
                force=force,
                holder=holder_info(run_id, "rollback"),
                note=note,
            )
        finally:
            if halt is not None:
                halt.busy.discard(name)
            remote.close()
            if progress is not None:
                getattr(progress, "idle", lambda *_: None)(name)

    names = [h[0] for h in hosts]
    got, started = _in_parallel(names, work, forks, deadline, halt=halt)
    settled = _settle(names, got, started, None, timeout, "while rolling back")
    if halt is not None and halt.is_set():
        run.stopped = f"{halt.reason}: no host started after it"
    elif any(result is None for result in settled):
        run.stopped = f"--timeout {timeout:g} s expired before every host was started"
    run.hosts = [r or _skipped(n, run.stopped) for n, r in zip(names, settled, strict=True)]
    run.duration = round(time.monotonic() - began, 3)
    return run
