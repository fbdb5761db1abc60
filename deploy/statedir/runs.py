"""What a run's journal says about it, and what apply and rollback may therefore do (pure).

A run's state is a fold of its records (`advance`), so the engine, ``deploy status`` and the
property test (tests/unit/test_statedir_runs.py) all read a journal the same way:

    (begin)            -> unfinished     killed or cut mid-run: no ``end`` line
    unfinished + end   -> changed        (outcome ok) or rolled back (its own undo completed)
    unfinished + rollback_end -> rolled back   (recovery of an interrupted run completed)
    changed + rollback_begin  -> rollback incomplete   an explicit ``deploy rollback`` began
    rollback incomplete + rollback_end -> rolled back
    any unclosed state + rollback_failed (ran and failed) -> undo failed   a human must look
    any state + resolved -> resolved   ``deploy resolve``: a human brought the host back

An undo that was cut short (a signal, a lost connection: no ``rollback_failed``, or one marked
``interrupted``) keeps its state, so ``deploy rollback`` (or, for an unfinished run, the next
apply) finishes it. An undo that ran and failed is never run again silently: every apply and
rollback on that host refuses (exit 3) until ``deploy resolve RUN`` records that a human
brought the host back, which closes the run there.

The invariant (issue 13): a *finished* run — changed or rolled back — is undone only by an
explicit ``deploy rollback``. `decide_apply` recovers only unfinished runs, and refuses a host
where a rollback was left incomplete (only ``deploy rollback`` may finish it) or failed (only a
human may, then ``deploy resolve``). A rollback that
is refused writes nothing (its ``rollback_begin`` follows the preflight), so a refusal can never
change a run's state; one that fails half-way leaves "rollback incomplete", never "unfinished".

Order: runs are ordered by ``host_seq`` from their ``begin`` record (one more than any run the
host had when the lock was taken, so it is the order runs began on that host), never by their
ids as text. Journals from before ``host_seq`` (0) come first, by start time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from deploy.statedir.records import (
    Begin,
    End,
    Record,
    Resolved,
    RollbackBegin,
    RollbackEnd,
    UndoFailed,
)


class RunState(StrEnum):
    UNFINISHED = "unfinished"
    CHANGED = "changed"
    ROLLED_BACK = "rolled back"
    UNDOING = "rollback incomplete"
    #: An undo ran and failed: a human must bring the host back (`deploy resolve`).
    UNDO_FAILED = "undo failed"
    #: Closed by a human after a failed undo (`deploy resolve`).
    RESOLVED = "resolved"


#: States in which the run finished: only an explicit ``deploy rollback`` may undo it.
FINISHED = frozenset({RunState.CHANGED, RunState.ROLLED_BACK})
#: States in which nothing of the run stands in the way of another run on the host.
CLOSED = frozenset({RunState.ROLLED_BACK, RunState.RESOLVED})


def advance(state: RunState, record: Record) -> RunState:
    """The run's state after ``record`` (the transition function of the table above)."""
    if isinstance(record, Resolved):
        return RunState.RESOLVED
    if state is RunState.RESOLVED:
        return state
    if isinstance(record, UndoFailed):
        if record.interrupted or state is RunState.ROLLED_BACK:
            return state
        return RunState.UNDO_FAILED
    if state is RunState.UNDO_FAILED:
        return state
    if state is RunState.UNFINISHED:
        if isinstance(record, End):
            return RunState.ROLLED_BACK if record.outcome == "rolled_back" else RunState.CHANGED
        if isinstance(record, RollbackEnd):
            return RunState.ROLLED_BACK
        return state
    if isinstance(record, RollbackEnd):
        return RunState.ROLLED_BACK
    if isinstance(record, RollbackBegin) and state is RunState.CHANGED:
        return RunState.UNDOING
    return state


def fold(records: Iterable[Record]) -> RunState:
    state = RunState.UNFINISHED
    for record in records:
        state = advance(state, record)
    return state


@dataclass(frozen=True)
class RunInfo:
    """One run kept on a host, as its journal describes it."""

    run_id: str
    state: RunState
    host_seq: int = 0
    started: str = ""
    playbook: str = ""
    user: str = ""
    #: ``file:line: why`` when the journal is damaged: no decision may rely on it.
    damaged: str | None = None
    #: Why its undo failed (the last ``rollback_failed``), for the refusal that names it.
    failure: str = ""

    def describe(self) -> str:
        what = f"run {self.run_id}"
        if self.playbook:
            what += f" ({self.playbook}, started {self.started or '?'})"
        return what


def summarize(run_id: str, records: Sequence[Record], damaged: str | None = None) -> RunInfo:
    begin = next((r for r in records if isinstance(r, Begin)), None)
    return RunInfo(
        run_id=run_id,
        state=fold(records),
        host_seq=begin.host_seq if begin else 0,
        started=(begin.since or begin.ts) if begin else "",
        playbook=begin.playbook if begin else "",
        user=begin.user if begin else "",
        damaged=damaged,
        failure=next(
            (r.error for r in reversed(records) if isinstance(r, UndoFailed) and not r.interrupted),
            "",
        ),
    )


def needs_human(run: RunInfo) -> str:
    """The one line that refuses an apply or a rollback on a host where ``run``'s undo failed."""
    why = f" ({' '.join(run.failure.split())[:300]})" if run.failure else ""
    return (
        f"the undo of {run.describe()} ran and failed{why}; it is not retried: a human "
        f"must bring the host back, then record it with `deploy resolve {run.run_id} "
        "[-m why]`; nothing was done"
    )


def ordered(runs: Iterable[RunInfo]) -> list[RunInfo]:
    """Oldest first, by the journals' own order (see the module docstring)."""
    return sorted(runs, key=lambda r: (r.host_seq, r.started, r.run_id))


def next_host_seq(runs: Iterable[RunInfo]) -> int:
    return max((r.host_seq for r in runs), default=0) + 1


@dataclass(frozen=True)
class ApplyDecision:
    """Before an apply's first step: runs to recover (newest first), or why not to start."""

    recover: list[RunInfo] = field(default_factory=list)
    blocked_by: list[RunInfo] = field(default_factory=list)

    def blocked_message(self, host: str) -> str:
        failed = [r for r in self.blocked_by if r.state is RunState.UNDO_FAILED]
        if failed:
            return f"{host}: {needs_human(failed[-1])}"
        names = ", ".join(r.describe() for r in self.blocked_by)
        ids = " ".join(r.run_id for r in self.blocked_by)
        return (
            f"{host}: a rollback of {names} did not complete; nothing was done. "
            f"Finish it with `deploy rollback {ids}` (see `deploy status`)"
        )


def decide_apply(runs: Iterable[RunInfo]) -> ApplyDecision:
    """Recover unfinished runs only; a half-done or failed rollback blocks the host (see the
    invariant)."""
    runs = ordered(runs)
    blocked = [r for r in runs if r.state in (RunState.UNDOING, RunState.UNDO_FAILED)]
    if blocked:
        return ApplyDecision(blocked_by=blocked)
    return ApplyDecision(recover=[r for r in reversed(runs) if r.state is RunState.UNFINISHED])


@dataclass(frozen=True)
class RollbackDecision:
    """Whether a rollback of one run may undo it on a host, and the message that says so."""

    action: Literal["undo", "nothing", "refuse"]
    message: str
    target: RunInfo | None = None
    #: Runs that began after the target and are not rolled back (a refusal lists them).
    later: list[RunInfo] = field(default_factory=list)


def decide_rollback(runs: Iterable[RunInfo], run_id: str) -> RollbackDecision:
    """Whether ``deploy rollback RUN_ID`` may undo that run on this host, and why not.

    Runs that began after it and still stand must be rolled back first (newest first): undoing
    an older run underneath them would restore files they changed since, which no later apply
    or rollback could then reason about. ``--force`` does not lift this.
    """
    runs = ordered(runs)
    position = next((i for i, r in enumerate(runs) if r.run_id == run_id), None)
    failed = [r for r in runs if r.state is RunState.UNDO_FAILED]
    if failed:  # whichever run is named: no undo is run on a host a human must look at
        target = runs[position] if position is not None else None
        return RollbackDecision("refuse", needs_human(failed[-1]), target)
    if position is None:
        return RollbackDecision("nothing", f"no run {run_id} on this host")
    target = runs[position]
    if target.damaged:
        return RollbackDecision("refuse", target.damaged, target)
    if target.state is RunState.ROLLED_BACK:
        return RollbackDecision("nothing", f"run {run_id} was already rolled back", target)
    if target.state is RunState.RESOLVED:
        return RollbackDecision(
            "nothing", f"run {run_id} was closed by hand (`deploy resolve`)", target
        )
    later = [r for r in runs[position + 1 :] if r.state not in CLOSED]
    if later:
        listed = "; ".join(f"{r.describe()}: {r.state}" for r in reversed(later))
        return RollbackDecision(
            "refuse",
            f"{len(later)} later run(s) still stand on this host and must be rolled back "
            f"first, newest first: {listed}; nothing was changed",
            target,
            later,
        )
    return RollbackDecision("undo", f"undo {target.describe()}", target)
