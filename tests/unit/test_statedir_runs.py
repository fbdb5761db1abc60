"""The run state machine and the decisions apply and rollback take from it.

The property test drives a model host through random sequences of apply (succeeding, failing
and rolling itself back, or crashing), rollback (of the latest run or an older one: completing,
refused by its preflight, failing half-way, or crashing) and checks issue 13's invariant after
every command: a finished run changes state only by an explicit rollback of that very run; a
refused rollback changes nothing; nothing finished ever becomes "unfinished" again. The model
appends records exactly as the engine does and takes every decision from `decide_apply` and
`decide_rollback`, the functions the engine calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from deploy.statedir import records as r
from deploy.statedir.runs import (
    FINISHED,
    RunInfo,
    RunState,
    advance,
    decide_apply,
    decide_rollback,
    fold,
    next_host_seq,
    ordered,
    summarize,
)

WRITE = r.WriteIntent(
    path="/f", before="a", after="b", original="a", mode=420, uid=0, gid=0, size=1
)


@dataclass
class ModelHost:
    journals: dict[str, list[r.Record]] = field(default_factory=dict)
    counter: int = 0

    def infos(self) -> list[RunInfo]:
        return [summarize(run_id, recs) for run_id, recs in self.journals.items()]

    def states(self) -> dict[str, RunState]:
        return {info.run_id: info.state for info in self.infos()}

    def undo(self, run_id: str, result: str, own: bool = False) -> bool:
        """Append an undo's records; False when the command died (crash)."""
        journal = self.journals[run_id]
        if result == "refuse":  # the preflight failed: nothing is written
            return True
        journal.append(r.RollbackBegin())
        if result == "crash":
            return False
        journal.append(r.Undone(op="write", path="/f", action="restored"))
        if result == "fail":  # ran and failed: a human must look
            journal.append(r.UndoFailed(error="x"))
            return True
        if result == "cut":  # interrupted (a signal, the connection lost): resumable
            journal.append(r.UndoFailed(error="x", interrupted=True))
            return False
        journal.append(r.End(outcome="rolled_back") if own else r.RollbackEnd())
        return True

    def apply(self, outcome: str, recovery: str) -> None:
        decision = decide_apply(self.infos())
        if decision.blocked_by:
            return
        for run in decision.recover:
            if not self.undo(run.run_id, recovery) or recovery in ("refuse", "fail", "cut"):
                return  # a failed recovery stops the apply before its first step
        self.counter += 1
        # Run ids sort the wrong way round on purpose: order must come from host_seq.
        run_id = f"{1000 - self.counter:04d}"
        journal = [r.Begin(run_id=run_id, host_seq=next_host_seq(self.infos()))]
        self.journals[run_id] = journal
        journal.append(WRITE)
        if outcome == "crash":
            return
        journal.append(r.Done(op="write", path="/f"))
        if outcome == "ok":
            journal.append(r.End(outcome="ok"))
        else:
            self.undo(run_id, "ok", own=True)

    def rollback(self, pick: int, result: str) -> str:
        runs = ordered(self.infos())
        if not runs:
            return "nothing"
        target = runs[-1 - pick % len(runs)].run_id
        decision = decide_rollback(runs, target)
        if decision.action == "undo":
            self.undo(target, result)
        return target if decision.action == "undo" else decision.action

    def resolve(self, pick: int) -> str | None:
        """``deploy resolve``: closes a run whose undo failed, and only such a run."""
        failed = [i for i in ordered(self.infos()) if i.state is RunState.UNDO_FAILED]
        if not failed:
            return None
        target = failed[pick % len(failed)].run_id
        self.journals[target].append(r.Resolved(by="ops", why="fixed by hand"))
        return target


COMMANDS = st.lists(
    st.one_of(
        st.tuples(
            st.just("apply"),
            st.sampled_from(["ok", "fail", "crash"]),
            st.sampled_from(["ok", "refuse", "fail", "cut", "crash"]),
        ),
        st.tuples(
            st.just("rollback"),
            st.integers(0, 3),
            st.sampled_from(["ok", "refuse", "fail", "cut", "crash"]),
        ),
        st.tuples(st.just("resolve"), st.integers(0, 3), st.just("")),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(COMMANDS)
def test_only_an_explicit_rollback_undoes_a_finished_run(
    commands: list[tuple[str, object, str]],
) -> None:
    host = ModelHost()
    ever_finished: set[str] = set()
    for command, arg, result in commands:
        before = host.states()
        touched: str | None = None
        failed_before = RunState.UNDO_FAILED in before.values()
        if command == "apply":
            host.apply(str(arg), result)
        elif command == "rollback":
            outcome = host.rollback(int(str(arg)), result)
            touched = outcome if outcome in before else None
        else:
            resolved = host.resolve(int(str(arg)))
        after = host.states()
        if failed_before and command != "resolve":
            # A failed undo is handed to a human: no apply or rollback changes anything.
            assert after == before, (command, before, after)
        if command == "resolve":
            assert all(
                after[run_id] is (RunState.RESOLVED if run_id == resolved else state)
                for run_id, state in before.items()
            )
        for run_id, state in before.items():
            if run_id != touched and state in FINISHED | {RunState.UNDOING}:
                assert after[run_id] is state, (command, run_id, state, after[run_id])
            if command == "rollback" and result == "refuse":
                assert after[run_id] is state
        ever_finished |= {run for run, state in after.items() if state in FINISHED}
        for run_id in ever_finished:
            assert after[run_id] is not RunState.UNFINISHED
        if touched is not None:  # an undo happened only with nothing standing above it
            later = [
                i for i in ordered(host.infos()) if i.host_seq > host_infos(host, touched).host_seq
            ]
            assert all(i.state in (RunState.ROLLED_BACK, RunState.RESOLVED) for i in later)


def host_infos(host: ModelHost, run_id: str) -> RunInfo:
    return next(i for i in host.infos() if i.run_id == run_id)


def info(run_id: str, state: RunState, seq: int) -> RunInfo:
    return RunInfo(run_id=run_id, state=state, host_seq=seq, playbook="pb", started=f"t{seq}")


def test_state_table() -> None:
    assert fold([r.Begin(), WRITE]) is RunState.UNFINISHED
    cut = r.UndoFailed(interrupted=True)
    assert fold([r.Begin(), WRITE, r.RollbackBegin(), cut]) is RunState.UNFINISHED
    assert fold([r.Begin(), WRITE, r.RollbackBegin(), r.UndoFailed()]) is RunState.UNDO_FAILED
    assert fold([r.Begin(), r.End(outcome="ok")]) is RunState.CHANGED
    assert fold([r.Begin(), r.End(outcome="ok"), r.RollbackBegin()]) is RunState.UNDOING
    assert fold([r.Begin(), r.End(outcome="ok"), r.RollbackBegin(), cut]) is RunState.UNDOING
    assert (
        fold([r.Begin(), r.End(outcome="ok"), r.RollbackBegin(), r.UndoFailed()])
        is RunState.UNDO_FAILED
    )
    failed = [r.Begin(), WRITE, r.RollbackBegin(), r.UndoFailed(error="old server unhealthy")]
    assert fold([*failed, r.RollbackBegin(), r.RollbackEnd()]) is RunState.UNDO_FAILED
    assert fold([*failed, r.Resolved(by="ops")]) is RunState.RESOLVED
    assert summarize("R", failed).failure == "old server unhealthy"
    assert (
        fold([r.Begin(), r.End(outcome="ok"), r.RollbackBegin(), r.RollbackEnd()])
        is RunState.ROLLED_BACK
    )
    assert fold([r.Begin(), WRITE, r.RollbackBegin(), r.RollbackEnd()]) is RunState.ROLLED_BACK
    assert advance(RunState.ROLLED_BACK, r.RollbackBegin()) is RunState.ROLLED_BACK


def test_order_comes_from_host_seq_not_from_ids() -> None:
    runs = [
        info("20261130T100000Z-ff", RunState.CHANGED, 1),
        info("20261130T100000Z-00", RunState.CHANGED, 2),
    ]
    assert [r.run_id for r in ordered(runs)] == ["20261130T100000Z-ff", "20261130T100000Z-00"]
    assert next_host_seq(runs) == 3
    assert decide_rollback(runs, "20261130T100000Z-00").action == "undo"


def test_an_older_run_is_refused_with_the_later_runs_listed() -> None:
    runs = [
        info("A", RunState.CHANGED, 1),
        info("B", RunState.CHANGED, 2),
        info("C", RunState.ROLLED_BACK, 3),
    ]
    decision = decide_rollback(runs, "A")
    assert decision.action == "refuse" and [r.run_id for r in decision.later] == ["B"]
    assert "run B (pb, started t2)" in decision.message and "foreign" not in decision.message
    assert decide_rollback(runs, "C").action == "nothing"
    assert decide_rollback(runs, "Z").message == "no run Z on this host"


def test_apply_recovers_unfinished_runs_only_and_stops_at_a_half_done_rollback() -> None:
    runs = [info("A", RunState.CHANGED, 1), info("B", RunState.UNFINISHED, 2)]
    assert [r.run_id for r in decide_apply(runs).recover] == ["B"]
    blocked = decide_apply([*runs, info("C", RunState.UNDOING, 3)])
    assert not blocked.recover and [r.run_id for r in blocked.blocked_by] == ["C"]
    assert "deploy rollback C" in blocked.blocked_message("h")


def test_a_failed_undo_blocks_apply_and_every_rollback_until_resolved() -> None:
    failed = RunInfo(run_id="B", state=RunState.UNDO_FAILED, host_seq=2, failure="unhealthy")
    runs = [info("A", RunState.CHANGED, 1), failed, info("C", RunState.UNFINISHED, 3)]
    blocked = decide_apply(runs)
    assert not blocked.recover
    message = blocked.blocked_message("h")
    assert message.startswith("h: the undo of run B ran and failed (unhealthy)")
    assert "`deploy resolve B [-m why]`" in message and "\n" not in message
    for target in ("A", "B", "C"):
        decision = decide_rollback(runs, target)
        assert decision.action == "refuse" and "deploy resolve B" in decision.message
    resolved = [info("A", RunState.CHANGED, 1), info("B", RunState.RESOLVED, 2)]
    assert decide_rollback(resolved, "A").action == "undo", "a resolved run no longer stands"
    assert decide_rollback(resolved, "B").action == "nothing"
    assert not decide_apply(resolved).blocked_by
