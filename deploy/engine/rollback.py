"""Undo: put a host back as it was before a run, from that run's journal on the host.

The same code serves the automatic rollback inside a failing run, the recovery of a run that a
crash left unfinished, and ``deploy rollback``. It reads only the journal and the saved copies,
never the playbook, so it works after the workstation died or the playbook changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from deploy.engine.journal import Journal, attach, read_copy, read_events
from deploy.engine.results import HostResult
from deploy.errors import DeployError, HostNotAttempted, InputError, RollbackFailed
from deploy.remote.host import RemoteHost
from deploy.remote.lock import RunSummary, acquire
from deploy.steps.files import check_undoable, undo_write


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
    note: Callable[[str], None] | None = None,
) -> list[str]:
    """Undo every change a run journaled, newest first; return one line per action.

    Order: stop every service the run touched (whatever serves now is the new code), restore
    the files newest first, then start each service as it ran before the run — exact command
    line, directory and environment — and wait until it is healthy; a service that was not
    running stays stopped. Each undo is journaled (``undone``) as it happens, so an interrupted
    rollback resumes where it stopped. The run's journal gets a final ``rollback_end`` (or ``end`` with outcome
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
    undone = {
        (e.get("op"), e.get("path") or e.get("service"))
        for e in events
        if e.get("event") == "undone"
    }
    intents = [e for e in events if e.get("event") == "intent"]
    pending = [e for e in intents if (e.get("op"), e.get("path") or e.get("service")) not in undone]
    unknown = [e for e in pending if e.get("op") not in ("write", "service")]
    lines: list[str] = []
    try:
        if unknown:
            raise RollbackFailed(
                f"{remote.name}: run {run_id} has a change this version cannot undo: {unknown[0].get('op')}"
            )
        # The earliest record of each service holds its state before the run.
        services: dict[str, dict[str, Any]] = {}
        for event in pending:
            if event.get("op") == "service":
                services.setdefault(str(event["service"]), event)
        # 0. All or nothing: a file someone changed since refuses the whole undo up front,
        #    before any service is stopped or any other file restored (--force skips this).
        newest: dict[str, dict[str, Any]] = {}
        written: dict[str, set[str]] = {}
        for event in pending:
            if event.get("op") == "write":
                newest[str(event["path"])] = event
                written.setdefault(str(event["path"]), set()).add(str(event.get("after")))
        if not force:
            for path, event in newest.items():
                check_undoable(remote, event, written[path])
        if services:  # the service machinery (~10 ms of imports) only when a run touched one
            from deploy.steps.service_undo import restore_previous, stop_current
        # 1. Stop what the run started, so the old code is never served by a new process.
        for name, event in services.items():
            lines.append(stop_current(remote, state_dir, name, event))
        # 2. Files back, newest change first.
        for event in reversed([e for e in pending if e.get("op") == "write"]):
            original = read_copy(remote, state_dir, run_id, str(event["original"]))
            outcome = undo_write(
                remote, event, original, force=force, written=written[str(event["path"])]
            )
            journal.write(
                {"event": "undone", "op": "write", "path": outcome.path, "action": outcome.action}
            )
            lines.append(
                f"{outcome.action} {outcome.path}"
                + (f" ({outcome.detail})" if outcome.detail else "")
            )
        # 3. The old server, as it ran before, on the old code; proven healthy.
        for name, event in services.items():
            lines.append(restore_previous(remote, state_dir, name, event, note=note))
            journal.write(
                {"event": "undone", "op": "service", "service": name, "action": "restored"}
            )
    except DeployError as exc:
        failure = (
            exc if isinstance(exc, RollbackFailed) else RollbackFailed(f"{remote.name}: {exc}")
        )
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
    note: Callable[[str], None] | None = None,
) -> HostResult:
    """``deploy rollback`` on one host: undo ``run_id``, or the newest run not yet undone.

    ``note`` hears what is going on (which run, the old server's start-up every 5 s), so a
    rollback that waits 45 minutes for a model to load never looks like a hang.
    """
    began = time.monotonic()
    result = HostResult(host=remote.name, outcome="nothing to do", run_id=run_id)
    try:
        remote.open()
        lock = acquire(remote, state_dir, holder)
    except (HostNotAttempted, InputError) as exc:  # InputError: an unset password_env
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
        if note is not None:
            note(f"rolling back run {target}")
        try:
            result.rollback = undo_run_events(
                remote, state_dir, target, force=force, reason="deploy rollback", note=note
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
