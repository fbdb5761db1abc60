"""Undo: put a host back as it was before a run, from that run's journal on the host.

The same code serves the automatic rollback inside a failing run, the recovery of a run that a
crash left unfinished, and ``deploy rollback``. It reads only the journal and the saved copies,
never the playbook, so it works after the workstation died or the playbook changed.

Every undo is preflight first, then act: the journal is read and checked record by record
(`deploy.statedir.records`), every saved copy is read and its sha256 checked, every file is
checked to be as the run left it (unless ``force``), and the old server's executable and
working directory must still exist. Only then is ``rollback_begin`` written and a server
stopped; a failed preflight writes nothing and touches nothing (`RollbackRefused`), so it never
changes any run's state (`deploy.statedir.runs`).
"""

from __future__ import annotations

import time
from typing import Any

from deploy import interrupt
from deploy.engine.journal import Journal, attach, read_copy, read_journal
from deploy.engine.results import HostResult
from deploy.errors import (
    DeployError,
    HostNotAttempted,
    HostUnreachable,
    InputError,
    Interrupted,
    RollbackFailed,
)
from deploy.remote.api import Host
from deploy.remote.lock import acquire
from deploy.statedir.records import End, RollbackBegin, RollbackEnd, UndoFailed
from deploy.statedir.runs import decide_rollback
from deploy.steps import undo_for
from deploy.steps.base import RecordUndo

Note = Any  # Callable[[str], None] | None, kept loose for the progress hooks


class RollbackRefused(RollbackFailed):
    """A precondition of the undo does not hold; nothing was changed (exit 3)."""


def _key(event: dict[str, Any]) -> tuple[Any, Any]:
    return event.get("op"), event.get("path") or event.get("service")


def pending_changes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's intents not yet undone, in the order they were made."""
    undone = {_key(e) for e in events if e.get("event") == "undone"}
    return [e for e in events if e.get("event") == "intent" and _key(e) not in undone]


def _refuse(remote: Host, run_id: str, why: str) -> RollbackRefused:
    return RollbackRefused(f"{remote.name}: run {run_id} not undone: {why}; nothing was changed")


def _handlers(
    remote: Host,
    state_dir: str,
    run_id: str,
    pending: list[dict[str, Any]],
    *,
    force: bool,
    note: Note,
    events: list[dict[str, Any]] | None = None,
) -> list[tuple[RecordUndo, list[dict[str, Any]]]]:
    """The undo handler of each ``op`` among the pending intents, with its records, in the
    order their ``restore`` runs (`RecordUndo.phase`, files before services; within a phase,
    the kind of change made last first).

    Raises:
        RollbackRefused: an intent no registered step undoes (a newer deploy's change).
    """
    by_op: dict[str, list[dict[str, Any]]] = {}
    newest: dict[str, int] = {}
    for position, event in enumerate(pending):
        by_op.setdefault(str(event.get("op")), []).append(event)
        newest[str(event.get("op"))] = position
    handlers: list[tuple[RecordUndo, list[dict[str, Any]]]] = []
    for op, records in by_op.items():
        kind = undo_for(op)
        if kind is None:
            raise _refuse(remote, run_id, f"it has a change this version cannot undo: {records[0]}")
        handler = kind(
            remote,
            state_dir,
            run_id,
            force=force,
            saved_copy=lambda digest: read_copy(remote, state_dir, run_id, digest),
            note=note,
            journal=events,  # the run's every record: what its changes produced
        )
        handlers.append((handler, records))
    # Within a phase, the kind of change made last is undone first.
    return sorted(handlers, key=lambda pair: (pair[0].phase, -newest[pair[0].op]))


def preflight(
    remote: Host,
    state_dir: str,
    run_id: str,
    pending: list[dict[str, Any]],
    *,
    force: bool,
    note: Note = None,
    events: list[dict[str, Any]] | None = None,
) -> list[tuple[RecordUndo, list[dict[str, Any]]]]:
    """Check everything the undo needs before it touches anything; the checked handlers.

    Each handler checks its own records (`RecordUndo.check`): the file handler reads every
    saved copy and checks its sha256 and that each file is as the run left it (unless
    ``force``); the service handler that the old server's executable and cwd still exist.

    Raises:
        RollbackRefused: a copy is missing or corrupt, a file changed since (without
            ``force``), the old server's executable or working directory is gone, or the
            journal holds a change this version cannot undo.
    """
    handlers = _handlers(remote, state_dir, run_id, pending, force=force, note=note, events=events)
    for handler, events in handlers:
        try:
            handler.check(events)
        except RollbackFailed as exc:
            raise _refuse(remote, run_id, str(exc)) from exc
    return handlers


def undo_run(
    remote: Host,
    state_dir: str,
    run_id: str,
    *,
    force: bool,
    reason: str,
    by: str = "",
    journal: Journal | None = None,
    note: Note = None,
) -> list[str]:
    """Undo every change a run journaled, newest first; return one line per action.

    Order: preflight (see the module docstring); stop every service the run touched (whatever
    serves now is the new code); restore the files newest first; start each service as it ran
    before the run — exact command line, directory and environment — and wait until it is
    healthy (a service that was not running stays stopped). Each undo is journaled
    (``undone``) as it happens, so an interrupted rollback resumes where it stopped. The run's
    journal gets a final ``rollback_end`` (``end`` with outcome rolled_back for its own run).

    Raises:
        RollbackRefused: the preflight failed; nothing was written or changed.
        JournalDamaged: the journal is damaged (named by file and line); nothing changed.
        RollbackFailed: something could not be put back; the journal records what was.
    """
    own_run = journal is not None
    if journal is None:
        journal = attach(remote, state_dir, read_journal(remote, state_dir, run_id), run_id)
    try:
        pending = pending_changes(journal.events)
        handlers = preflight(
            remote, state_dir, run_id, pending, force=force, note=note, events=journal.events
        )
    except BaseException:
        journal.close()
        raise
    journal.write(RollbackBegin(reason=reason[:500], force=force, by=by))
    lines: list[str] = []
    # Each pending intent went to the handler its step declared for its op (`_handlers`); the
    # phases below are `RecordUndo`'s: release everything, then restore files, then services.
    try:
        # Not cut short by the run's first interrupt: putting the host back is what it asked
        # for (`deploy.interrupt`); a second signal abandons the run, journal as it stands.
        with interrupt.shielded():
            for handler, events in handlers:
                lines.extend(handler.release(events))
            for handler, events in handlers:
                lines.extend(handler.restore(events, journal))
    except DeployError as exc:
        failure = (
            exc if isinstance(exc, RollbackFailed) else RollbackFailed(f"{remote.name}: {exc}")
        )
        # Cut short (the connection lost, an interrupt): `deploy rollback` finishes it. Ran
        # and failed: running it again would fail the same way, so it waits for a human.
        interrupted = isinstance(exc, HostUnreachable | Interrupted)
        try:
            journal.write(UndoFailed(error=str(failure), interrupted=interrupted))
        finally:
            journal.close()
        if interrupted:
            raise RollbackFailed(
                f"{failure}; the undo was cut short: `deploy rollback {run_id}` finishes it"
            ) from exc
        raise RollbackFailed(
            f"{failure}; it is not retried: bring the host back by hand, then record it with "
            f"`deploy resolve {run_id} -m WHY`"
        ) from exc
    journal.finish(End(outcome="rolled_back") if own_run else RollbackEnd(by=by))
    return lines


def rollback_host(
    remote: Host,
    state_dir: str,
    run_id: str,
    *,
    force: bool,
    holder: dict[str, Any],
    note: Note = None,
) -> HostResult:
    """``deploy rollback RUN_ID`` on one host: undo that run if nothing later stands on it.

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
        decision = decide_rollback(lock.runs, run_id)
        if decision.action == "nothing":
            result.error = decision.message
            return result
        if decision.action == "refuse":
            result.outcome, result.error = "rollback failed", f"{remote.name}: {decision.message}"
            return result
        if note is not None:
            note(f"rolling back run {run_id}")
        try:
            result.rollback = undo_run(
                remote,
                state_dir,
                run_id,
                force=force,
                reason="deploy rollback",
                by=str(holder.get("run_id", "")),
                note=note,
            )
            result.outcome = "restored"
            result.changed_files = [
                line.split(" ", 1)[1].split(" (")[0]
                for line in result.rollback
                if line.startswith("restored")
            ]
        except RollbackFailed as exc:
            result.outcome, result.error = "rollback failed", str(exc)
        except DeployError as exc:  # e.g. StepFailed: the run's journal is gone
            result.outcome, result.error = "rollback failed", str(exc)
    finally:
        lock.release()
        result.ops = dict(remote.ops)
        result.duration = round(time.monotonic() - began, 3)
    return result
