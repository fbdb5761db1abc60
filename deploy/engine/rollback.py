"""Undo: put a host back as it was before a run, from that run's journal on the host.

The same code serves the automatic rollback inside a failing run, the recovery of a run that a
crash left unfinished, and ``deploy rollback``. It reads only the journal and the saved copies,
never the playbook, so it works after the workstation died or the playbook changed.
"""

from __future__ import annotations

import time
from typing import Any

from deploy.engine.journal import Journal, attach, read_copy, read_events
from deploy.engine.results import HostResult
from deploy.errors import DeployError, HostNotAttempted, RollbackFailed
from deploy.remote.host import RemoteHost
from deploy.remote.lock import RunSummary, acquire
from deploy.steps.files import undo_write


def is_undone(run: RunSummary) -> bool:
    last = run.last
    return last.get("event") == "rollback_end" or (
        last.get("event") == "end" and last.get("outcome") == "rolled_back"
    )


def unfinished_runs(runs: list[RunSummary]) -> list[RunSummary]:
    """Runs whose journal has no final line: killed or disconnected half-way."""
    return [run for run in runs if not run.finished]


def undo_run_events(
    remote: RemoteHost,
    state_dir: str,
    run_id: str,
    *,
    force: bool,
    reason: str,
    journal: Journal | None = None,
    events: list[dict[str, Any]] | None = None,
) -> list[str]:
    """Undo every change a run journaled, newest first; return one line per action.

    Each undo is journaled (``undone``) as it happens, so an interrupted rollback resumes where
    it stopped. The run's journal gets a final ``rollback_end`` (or ``end`` with outcome
    ``rolled_back`` when undoing the current run).

    Raises:
        RollbackFailed: something could not be put back (ForeignChange when it was changed
            by someone else since); the journal records what was and was not undone.
    """
    own_run = journal is not None
    if events is None:
        events = read_events(remote, state_dir, run_id)
    if journal is None:
        journal = attach(remote, state_dir, run_id)
    journal.write({"event": "rollback_begin", "reason": reason[:500], "force": force})
    done = {(e.get("op"), e.get("path")) for e in events if e.get("event") == "undone"}
    lines: list[str] = []
    try:
        for event in reversed([e for e in events if e.get("event") == "intent"]):
            key = (event.get("op"), event.get("path"))
            if key in done:
                continue
            if event.get("op") == "write":
                original = read_copy(remote, state_dir, run_id, str(event["original"]))
                outcome = undo_write(remote, event, original, force=force)
                journal.write(
                    {
                        "event": "undone",
                        "op": "write",
                        "path": outcome.path,
                        "action": outcome.action,
                    }
                )
                lines.append(
                    f"{outcome.action} {outcome.path}"
                    + (f" ({outcome.detail})" if outcome.detail else "")
                )
            else:
                raise RollbackFailed(
                    f"{remote.name}: run {run_id} has a change this version cannot undo: {event.get('op')}"
                )
            done.add(key)
    except DeployError as exc:
        failure = exc if isinstance(exc, RollbackFailed) else RollbackFailed(str(exc))
        journal.write({"event": "rollback_failed", "error": str(failure)})
        raise failure from exc
    if own_run:
        journal.finish("end", "rolled_back")
    else:
        journal.finish("rollback_end", "rolled_back")
    return lines


def rollback_host(
    remote: RemoteHost,
    state_dir: str,
    run_id: str | None,
    *,
    force: bool,
    holder: dict[str, Any],
) -> HostResult:
    """``deploy rollback`` on one host: undo ``run_id``, or the newest run not yet undone."""
    began = time.monotonic()
    result = HostResult(host=remote.name, outcome="nothing to do", run_id=run_id)
    try:
        remote.open()
        lock = acquire(remote, state_dir, holder)
    except HostNotAttempted as exc:
        result.outcome, result.error = "not attempted", str(exc)
        return result
    except DeployError as exc:
        result.outcome, result.error = "rollback failed", str(exc)
        return result
    try:
        candidates = [run for run in lock.runs if not is_undone(run)]
        if run_id is not None:
            known = {run.run_id: run for run in lock.runs}
            if run_id not in known:
                result.outcome, result.error = "nothing to do", f"no run {run_id} on this host"
                return result
            if is_undone(known[run_id]) and not force:
                result.error = f"run {run_id} was already rolled back"
                return result
            target = run_id
        elif candidates:
            target = candidates[-1].run_id
        else:
            result.error = "no run to roll back on this host"
            return result
        result.run_id = target
        try:
            result.rollback = undo_run_events(
                remote, state_dir, target, force=force, reason="deploy rollback"
            )
            result.outcome = "restored"
            result.changed_files = [
                line.split(" ", 1)[1].split(" (")[0]
                for line in result.rollback
                if line.startswith("restored")
            ]
        except RollbackFailed as exc:
            result.outcome, result.error = "rollback failed", str(exc)
    finally:
        lock.release()
        result.ops = dict(remote.ops)
        result.duration = round(time.monotonic() - began, 3)
    return result
