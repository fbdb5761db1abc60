"""One run of a playbook on one host: lock → recover → steps → (rollback) → commit.

The sequence is the product's promise in code: take the host's lock (or leave it untouched),
undo any run a crash left unfinished, run the steps in order, and if anything fails after the
first change, undo every change in reverse order before reporting. The engine never decides
exit codes; it records outcomes (see `deploy.engine.results`).
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.config.steps import action_of, args_of
from deploy.engine.journal import Journal, now_iso, read_events
from deploy.engine.results import HostResult, StepResult
from deploy.engine.rollback import undo_run_events, unfinished_runs
from deploy.errors import (
    DeployError,
    HostNotAttempted,
    HostUnreachable,
    InputError,
    RollbackFailed,
)
from deploy.remote.connect import ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.remote.lock import HostLock, acquire, describe_holder
from deploy.steps import build_step
from deploy.steps.base import Planned, StepContext

log = logging.getLogger("deploy.engine")


class Progress(Protocol):
    """Who wants to know as a run goes (the terminal display, a log file)."""

    def host_event(self, host: str, message: str) -> None: ...

    def step_started(self, host: str, index: int, title: str) -> None: ...

    def step_finished(self, host: str, result: StepResult) -> None: ...


class NoProgress:
    def host_event(self, host: str, message: str) -> None:
        pass

    def step_started(self, host: str, index: int, title: str) -> None:
        pass

    def step_finished(self, host: str, result: StepResult) -> None:
        pass


@dataclass
class RunOptions:
    run_id: str
    playbook: str = ""
    check_mode: bool = False
    accept_new_host_keys: bool = False
    force: bool = False
    progress: Progress = field(default_factory=NoProgress)


def connect_settings(name: str, spec: HostSpec, *, accept_new: bool = False) -> ConnectSettings:
    return ConnectSettings(
        name=name,
        address=spec.address or name,
        port=spec.port,
        user=spec.user,
        identity_file=spec.identity_file,
        known_hosts=spec.known_hosts,
        accept_new_host_keys=spec.accept_new_host_keys or accept_new,
        password_env=spec.password_env,
        connect_timeout=spec.connect_timeout,
    )


def holder_info(run_id: str, playbook: str) -> dict[str, Any]:
    """Who holds a lock: enough for another operator to find the run and its owner."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "run_id": run_id,
        "user": user,
        "workstation": socket.gethostname(),
        "pid": os.getpid(),
        "since": now_iso(),
        "playbook": playbook,
    }


def apply_host(plan: HostPlan, options: RunOptions) -> HostResult:
    """Run a host's steps and return what happened; never raises for expected failures."""
    name, spec = plan.name, plan.spec
    began = time.monotonic()
    result = HostResult(host=name, run_id=options.run_id)
    remote = RemoteHost(connect_settings(name, spec, accept_new=options.accept_new_host_keys))
    progress = options.progress
    try:
        remote.open()
    except (HostNotAttempted, InputError) as exc:
        # InputError: e.g. password_env names an unset variable — found only when connecting,
        # and nothing was done on the host, so it is "not attempted", not an internal error.
        result.outcome, result.error = "not attempted", str(exc)
        progress.host_event(name, f"not attempted: {exc}")
        return result
    lock: HostLock | None = None
    try:
        if not options.check_mode:
            try:
                lock = acquire(
                    remote,
                    spec.state_dir,
                    holder_info(options.run_id, options.playbook),
                    prefetch=prefetch_paths(plan),
                )
            except HostNotAttempted as exc:
                result.outcome, result.error = "not attempted", str(exc)
                progress.host_event(name, str(exc))
                return result
            except DeployError as exc:
                result.outcome, result.error = "failed", str(exc)
                return result
            _note_takeover(lock, result, progress)
            if not _recover(remote, spec.state_dir, lock, result, progress):
                return result
            if result.recovered:
                remote.prefetched.clear()  # an undo ran: read the files as it left them
        if options.check_mode:
            _preview_recovery(remote, spec.state_dir, result)
        _run_steps(remote, plan, options, result)
    finally:
        if lock is not None:
            lock.release()
        result.ops = dict(remote.ops)
        remote.close()
        result.duration = round(time.monotonic() - began, 3)
    return result


#: Steps that touch nothing but the file they name (and run only our own compile check). The
#: files the run's leading such steps read are prefetched with the lock: read in the lock's
#: exec, no round trip of their own. Any other step (a command, a service) may change files,
#: so it ends that prefix, and what was prefetched and not yet read is dropped before it runs.
FILE_STEPS = frozenset(
    {"backup", "python_insert", "patch", "append", "verify_python", "verify_tail"}
)


def prefetch_paths(plan: HostPlan) -> list[str]:
    """The files the plan's leading file steps read, in order (see `FILE_STEPS`)."""
    paths: list[str] = []
    for _, entry in plan.steps:
        if action_of(entry) not in FILE_STEPS:
            break
        path = getattr(args_of(entry), "path", None)
        if isinstance(path, str) and path.startswith("/") and path not in paths:
            paths.append(path)
    return paths


def _preview_recovery(remote: RemoteHost, state_dir: str, result: HostResult) -> None:
    """Under --check (and the plan shown before asking): say which unfinished runs the real run
    will undo first, read over SFTP without taking the lock, so the operator is asked first."""
    for run_id in remote.listdir(f"{state_dir.rstrip('/')}/runs"):
        try:
            events = read_events(remote, state_dir, run_id)
        except DeployError:
            continue
        last = events[-1].get("event") if events else None
        if last not in ("end", "rollback_end"):
            result.recovered.append(f"run {run_id} did not finish: it will be undone first")


def _note_takeover(lock: HostLock, result: HostResult, progress: Progress) -> None:
    """Say so when the lock's previous holder died mid-run: a takeover is never silent."""
    holder = lock.previous_holder or {}
    dead = {run.run_id for run in unfinished_runs(lock.runs)}
    if holder.get("run_id") in dead:
        line = f"took over the lock from run {holder['run_id']}, which died mid-run ({describe_holder(holder)})"
        progress.host_event(result.host, line)
        result.recovered.append(line)


def _recover(
    remote: RemoteHost, state_dir: str, lock: HostLock, result: HostResult, progress: Progress
) -> bool:
    """Undo runs that a crash left unfinished on this host; False if that failed (exit 3)."""
    for run in unfinished_runs(lock.runs):
        progress.host_event(remote.name, f"found unfinished run {run.run_id}; undoing it first")
        try:
            lines = undo_run_events(
                remote,
                state_dir,
                run.run_id,
                force=False,
                reason="recovery",
                note=lambda message: progress.host_event(remote.name, message),
            )
        except RollbackFailed as exc:
            result.outcome = "rollback failed"
            result.error = f"unfinished run {run.run_id} could not be undone: {exc}"
            return False
        result.recovered.append(f"run {run.run_id}: " + ("; ".join(lines) or "nothing had changed"))
    return True


def _run_steps(remote: RemoteHost, plan: HostPlan, options: RunOptions, result: HostResult) -> None:
    name, spec, steps = remote.name, plan.spec, plan.steps
    progress = options.progress
    journal = Journal(
        remote,
        spec.state_dir,
        options.run_id,
        {
            "run_id": options.run_id,
            "playbook": options.playbook,
            "host": name,
            **holder_info(options.run_id, options.playbook),
        },
    )
    ctx = StepContext(
        host=name,
        remote=remote,
        journal=journal,
        check_mode=options.check_mode,
        state_dir=spec.state_dir,
        vars=plan.vars,
        progress=progress,
        run_id=options.run_id,
        services=dict(plan.services),
        force=options.force,
    )
    for position, (index, entry) in enumerate(steps):
        step = build_step(entry, index)
        if step.kind not in FILE_STEPS:
            remote.prefetched.clear()
        ctx.step_index = index
        ctx.upcoming = [later for _, later in steps[position + 1 :]]
        progress.step_started(name, index, step.title)
        began = time.monotonic()
        step_result = StepResult(index=index, kind=step.kind, title=step.title, status="ok")
        planned: Planned | None = None
        try:
            planned = step.plan(ctx)
            step.apply(ctx, planned)
            if not options.check_mode or step.runs_in_check_mode:
                step.verify(ctx, planned)
            step_result.summary = planned.summary
            step_result.figures = planned.figures
            step_result.diff = "".join(change.diff for change in planned.changes)
            if planned.changes:
                step_result.status = "would change" if options.check_mode else "changed"
                result.changed_files.extend(
                    c.path for c in planned.changes if c.path not in result.changed_files
                )
            elif options.check_mode and step.mutating and not planned.noop:
                step_result.status = "would change"
            elif planned.skipped:
                step_result.status = "skipped"
            elif planned.noop:
                step_result.status = "unchanged"
            elif options.check_mode and not step.runs_in_check_mode and not step.mutating:
                step_result.status = "skipped"
        except Exception as exc:  # every failure, expected or not, must lead to the undo
            step_result.status = "failed"
            if planned is not None:  # what a failed check measured (a gate's figures)
                step_result.figures = planned.figures
            step_result.summary = (
                str(exc) if isinstance(exc, DeployError) else f"internal error: {exc!r}"
            )
            step_result.duration = round(time.monotonic() - began, 3)
            result.steps.append(step_result)
            progress.step_finished(name, step_result)
            if not isinstance(exc, DeployError):
                log.error("internal error on %s:\n%s", name, traceback.format_exc())
            for later_index, later in steps[position + 1 :]:
                result.steps.append(
                    StepResult(
                        later_index,
                        build_step(later, later_index).kind,
                        build_step(later, later_index).title,
                        "not run",
                    )
                )
            _fail(remote, spec, ctx, journal, result, index, step_result.summary, exc, progress)
            return
        step_result.duration = round(time.monotonic() - began, 3)
        result.steps.append(step_result)
        progress.step_finished(name, step_result)
    if options.check_mode:
        result.outcome = "would change" if result.changed_files else "unchanged"
        return
    if not ctx.changed:
        for done in result.steps:
            if done.kind == "backup" and done.status == "ok":
                done.status, done.summary = (
                    "unchanged",
                    "nothing changed in this run: no copy needed",
                )
    result.outcome = "changed" if ctx.changed else "unchanged"
    journal.finish("end", "ok", manifest=_manifest(journal.events))


def _fail(
    remote: RemoteHost,
    spec: HostSpec,
    ctx: StepContext,
    journal: Journal,
    result: HostResult,
    index: int,
    reason: str,
    exc: BaseException,
    progress: Progress,
) -> None:
    result.failed_step = index
    result.error = f"step {index + 1} failed: {reason}"
    if not journal.started:
        result.outcome = "failed"
        return
    if isinstance(exc, HostUnreachable):
        result.outcome = "rollback failed"
        result.error += (
            "; the connection is gone, so nothing could be undone now: the host keeps an "
            "unfinished journal that the next `deploy apply` or `deploy rollback` undoes"
        )
        journal.close()
        return
    progress.host_event(remote.name, f"step {index + 1} failed; rolling back")
    try:
        result.rollback = undo_run_events(
            remote,
            spec.state_dir,
            journal.run_id,
            force=False,
            reason=reason,
            journal=journal,
            events=journal.events,
            note=ctx.note,
        )
        result.outcome = "rolled back"
    except (RollbackFailed, HostUnreachable) as undo_error:
        result.outcome = "rollback failed"
        result.error += f"; ROLLBACK FAILED: {undo_error}"
        journal.close()


def _manifest(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per file touched: path, sha256 before (original) and after (final), mode, owner, size."""
    files: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("event") != "intent" or event.get("op") != "write":
            continue
        path = str(event["path"])
        entry = files.setdefault(
            path,
            {
                "path": path,
                "sha256_before": event["before"],
                "mode": event["mode"],
                "uid": event["uid"],
                "gid": event["gid"],
            },
        )
        entry["sha256_after"] = event["after"]
        entry["size"] = event["size"]
        entry["saved_copy"] = f"files/{event['original']}"
    return list(files.values())
