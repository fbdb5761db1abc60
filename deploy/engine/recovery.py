"""Before a run's first step: what earlier runs on the host leave for it to do.

Only runs interrupted mid-change (no ``end`` in their journal) are undone here, and the plan
says so before asking; a finished run is never undone as a side effect of an apply, and a host
where a ``deploy rollback`` was left incomplete is left alone (exit 3) until that command
finishes it. The decisions are `deploy.statedir.runs.decide_apply`'s, the code the property
test checks.
"""

from __future__ import annotations

from typing import Protocol

from deploy.engine.journal import read_journal
from deploy.engine.results import HostResult
from deploy.engine.rollback import undo_run
from deploy.errors import DeployError
from deploy.remote.api import Host
from deploy.remote.lock import HostLock, describe_holder
from deploy.statedir.layout import Layout
from deploy.statedir.records import JournalDamaged
from deploy.statedir.runs import RunInfo, decide_apply, summarize


class Progress(Protocol):
    def host_event(self, host: str, message: str) -> None: ...


def preview_recovery(remote: Host, state_dir: str, result: HostResult) -> bool:
    """Under --check (and the plan shown before asking): say which unfinished runs the real run
    will undo first (`deploy.statedir.runs.decide_apply`, the decision the real run takes),
    read over SFTP without taking the lock, so the operator is asked first. False when the
    real run would not start (a rollback left incomplete)."""
    runs: list[RunInfo] = []
    for run_id in remote.listdir(Layout(state_dir).runs):
        try:
            runs.append(summarize(run_id, read_journal(remote, state_dir, run_id).records))
        except JournalDamaged as exc:
            result.recovered.append(f"run {run_id} is left alone: {exc}")
        except DeployError:
            continue
    decision = decide_apply(runs)
    if decision.blocked_by:
        result.outcome, result.error = "rollback failed", decision.blocked_message(remote.name)
        return False
    for run in decision.recover:
        result.recovered.append(
            f"{run.describe()} was interrupted mid-change: it will be undone first"
        )
    return True


def note_takeover(lock: HostLock, result: HostResult, progress: Progress) -> None:
    """Say so when the lock's previous holder died mid-run: a takeover is never silent."""
    holder = lock.previous_holder or {}
    dead = {run.run_id for run in decide_apply(lock.runs).recover}
    if holder.get("run_id") in dead:
        line = f"took over the lock from run {holder['run_id']}, which died mid-run ({describe_holder(holder)})"
        progress.host_event(result.host, line)
        result.recovered.append(line)


def recover(
    remote: Host, state_dir: str, lock: HostLock, result: HostResult, progress: Progress
) -> bool:
    """Undo runs interrupted mid-change on this host; False if that failed or may not (exit 3).

    Only runs without an end are recovered; a finished run is never undone here, and a host
    where a ``deploy rollback`` was left incomplete is not touched (`decide_apply`).
    """
    decision = decide_apply(lock.runs)
    if decision.blocked_by:
        result.outcome, result.error = "rollback failed", decision.blocked_message(remote.name)
        return False
    for run in decision.recover:
        progress.host_event(
            remote.name, f"{run.describe()} was interrupted mid-change; undoing it first"
        )
        try:
            lines = undo_run(
                remote,
                state_dir,
                run.run_id,
                force=False,
                reason="recovery",
                by=result.run_id or "",
                note=lambda message: progress.host_event(remote.name, message),
            )
        except DeployError as exc:
            result.outcome = "rollback failed"
            result.error = f"interrupted run {run.run_id} could not be undone: {exc}"
            return False
        result.recovered.append(f"run {run.run_id}: " + ("; ".join(lines) or "nothing had changed"))
    return True
