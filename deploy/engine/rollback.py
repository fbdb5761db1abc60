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

from deploy.engine.journal import Journal, attach, read_copy, read_journal
from deploy.engine.results import HostResult
from deploy.errors import DeployError, HostNotAttempted, InputError, RollbackFailed
from deploy.remote.api import Host
from deploy.remote.lock import acquire
from deploy.statedir.records import End, RollbackBegin, RollbackEnd, UndoFailed, Undone
from deploy.statedir.runs import decide_rollback
from deploy.steps.files import check_undoable, undo_write

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


def preflight(
    remote: Host,
    state_dir: str,
    run_id: str,
    pending: list[dict[str, Any]],
    *,
    force: bool,
) -> dict[str, bytes]:
    """Check everything the undo needs before it touches anything; the saved copies by sha.

    Raises:
        RollbackRefused: a copy is missing or corrupt, a file changed since (without
            ``force``), the old server's executable or working directory is gone, or the
            journal holds a change this version cannot undo.
    """
    unknown = [e for e in pending if e.get("op") not in ("write", "service")]
    if unknown:
        raise _refuse(remote, run_id, f"it has a change this version cannot undo: {unknown[0]}")
    copies: dict[str, bytes] = {}
    written: dict[str, set[str]] = {}
    newest: dict[str, dict[str, Any]] = {}
    for event in pending:
        if event.get("op") == "write":
            path = str(event["path"])
            newest[path] = event
            written.setdefault(path, set()).add(str(event.get("after")))
            digest = str(event["original"])
            if digest not in copies:
                try:
                    copies[digest] = read_copy(remote, state_dir, run_id, digest)
                except RollbackFailed as exc:
                    raise _refuse(remote, run_id, str(exc)) from exc
    if not force:
        for path, event in newest.items():
            try:
                check_undoable(remote, event, written[path])
            except RollbackFailed as exc:
                raise _refuse(remote, run_id, str(exc)) from exc
    for event in pending:
        if event.get("op") != "service":
            continue
        before = event.get("before") or {}
        if not before.get("running") or (event.get("spec") or {}).get("manager") == "systemd":
            continue
        argv = before.get("argv") or []
        places = (("executable", argv[0] if argv else None), ("cwd", before.get("cwd")))
        for label, place in places:
            if isinstance(place, str) and place.startswith("/") and remote.stat(place) is None:
                raise _refuse(
                    remote,
                    run_id,
                    f"the old {event.get('service')} server's {label} {place} no longer exists, "
                    "so it could not be started again",
                )
    return copies


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
        copies = preflight(remote, state_dir, run_id, pending, force=force)
    except BaseException:
        journal.close()
        raise
    journal.write(RollbackBegin(reason=reason[:500], force=force, by=by))
    services: dict[str, dict[str, Any]] = {}
    written: dict[str, set[str]] = {}
    for event in pending:  # the earliest record of each service holds its state before the run
        if event.get("op") == "service":
            services.setdefault(str(event["service"]), event)
        else:
            written.setdefault(str(event["path"]), set()).add(str(event.get("after")))
    lines: list[str] = []
    try:
        if services:  # the service machinery (~10 ms of imports) only when a run touched one
            from deploy.steps.service_undo import restore_previous, stop_current
        for name, event in services.items():
            lines.append(stop_current(remote, state_dir, name, event))
        for event in reversed([e for e in pending if e.get("op") == "write"]):
            path = str(event["path"])
            outcome = undo_write(
                remote, event, copies[str(event["original"])], force=force, written=written[path]
            )
            journal.write(Undone(op="write", path=outcome.path, action=outcome.action))
            lines.append(
                f"{outcome.action} {outcome.path}"
                + (f" ({outcome.detail})" if outcome.detail else "")
            )
        for name, event in services.items():
            lines.append(restore_previous(remote, state_dir, name, event, note=note))
            journal.write(Undone(op="service", service=name, action="restored"))
    except DeployError as exc:
        failure = (
            exc if isinstance(exc, RollbackFailed) else RollbackFailed(f"{remote.name}: {exc}")
        )
        journal.write(UndoFailed(error=str(failure)))
        journal.close()
        raise failure from exc
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
