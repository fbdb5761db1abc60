"""One run of a playbook on one host: lock → recover → steps → (rollback) → commit.

The sequence is the product's promise in code: take the host's lock (or leave it untouched),
undo any run a crash left unfinished, run the steps in order, and if anything fails after the
first change, undo every change in reverse order before reporting. The engine never decides
exit codes; it records outcomes (see `deploy.engine.results`).
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploy import trace
from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.config.steps import VerifyPythonArgs, action_of, args_of
from deploy.engine.journal import Journal, now_iso
from deploy.engine.recovery import note_takeover, preview_recovery, recover
from deploy.engine.results import HostResult, StepResult
from deploy.engine.rollback import undo_run
from deploy.errors import (
    DeployError,
    HostNotAttempted,
    HostUnreachable,
    InputError,
    PermissionDenied,
    RollbackFailed,
    StepFailed,
)
from deploy.remote.become import state_dir_probe
from deploy.remote.connect import ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.remote.lock import HostLock, acquire
from deploy.statedir.records import End
from deploy.statedir.runs import next_host_seq
from deploy.steps import build_step
from deploy.steps.base import Planned, StepContext
from deploy.steps.verify_python import speculative_command

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


class Cancel:
    """Set once (SIGINT, SIGTERM, ``--timeout``): hosts start no new step, and a host in the
    middle of its changes is rolled back as if its next step had failed."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        #: Hosts between their lock and their outcome: what an abandon leaves mid-run.
        self.busy: set[str] = set()

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


@dataclass
class RunOptions:
    run_id: str
    playbook: str = ""
    check_mode: bool = False
    accept_new_host_keys: bool = False
    force: bool = False
    progress: Progress = field(default_factory=NoProgress)
    #: The inventory file, recorded so that ``deploy rollback`` finds this run.
    inventory: str | None = None
    #: Called with the run's record before any host is touched (the workstation's history:
    #: a run killed mid-way is still found by ``deploy rollback``).
    on_start: Callable[[Any], None] | None = None
    cancel: Cancel = field(default_factory=Cancel)


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
        ssh_config=spec.ssh_config,
        become=bool(spec.become),
        become_user=spec.become_user or "root",
        become_password_env=spec.become_password_env,
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


class _Said:
    """The run's listener, remembering what it was told: the human summary leaves a host's
    errors to the live lines, so whatever error no line said yet must still be said once."""

    def __init__(self, inner: Progress) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.failures: list[str] = []

    def host_event(self, host: str, message: str) -> None:
        self.texts.append(message)
        self.inner.host_event(host, message)

    def step_started(self, host: str, index: int, title: str) -> None:
        self.inner.step_started(host, index, title)

    def step_finished(self, host: str, result: StepResult) -> None:
        if result.status == "failed" and result.summary:
            self.failures.append(result.summary)
        self.inner.step_finished(host, result)

    def __getattr__(self, name: str) -> Any:  # busy/idle heartbeats, where the listener has them
        return getattr(self.inner, name)

    def unsaid(self, result: HostResult) -> str | None:
        """``result.error`` unless a line already said it (a rollback that failed is always
        said in full: it is what a human must act on)."""
        error = result.error
        if not error or result.outcome == "skipped":
            return None
        if result.outcome != "rollback failed" and (
            any(error in text for text in self.texts)
            or any(summary in error for summary in self.failures)
        ):
            return None
        return error


def apply_host(plan: HostPlan, options: RunOptions) -> HostResult:
    """Run a host's steps and return what happened; never raises for expected failures.

    Whatever error ends the host is said on the progress lines exactly once (`_Said`).
    """
    said = _Said(options.progress)
    result = _apply_host(plan, dataclasses.replace(options, progress=said))
    error = said.unsaid(result)
    if error is not None:
        options.progress.host_event(plan.name, error)
    return result


def _apply_host(plan: HostPlan, options: RunOptions) -> HostResult:
    name, spec = plan.name, plan.spec
    began = time.monotonic()
    result = HostResult(host=name, run_id=options.run_id)
    remote = RemoteHost(connect_settings(name, spec, accept_new=options.accept_new_host_keys))
    progress = options.progress
    if options.cancel.is_set() and not options.check_mode:
        result.outcome, result.error = "skipped", f"never touched: {options.cancel.reason}"
        return result
    try:
        remote.open()
    except (HostNotAttempted, InputError) as exc:
        # InputError: e.g. password_env names an unset variable — found only when connecting,
        # and nothing was done on the host, so it is "not attempted", not an internal error.
        result.outcome, result.error = "not attempted", str(exc)
        progress.host_event(name, f"not attempted: {exc}")
        return result
    lock: HostLock | None = None
    host_seq = 0
    options.cancel.busy.add(name)
    try:
        if not options.check_mode:
            try:
                lock = acquire(
                    remote,
                    spec.state_dir,
                    holder_info(options.run_id, options.playbook),
                    prefetch=prefetch_paths(plan),
                    speculate=speculative_commands(plan),
                )
            except HostNotAttempted as exc:
                result.outcome, result.error = "not attempted", str(exc)
                progress.host_event(name, str(exc))
                return result
            except DeployError as exc:
                result.outcome, result.error = "failed", str(exc)
                # said live, as a step's failure is: the summary leaves out what was said
                progress.host_event(name, str(exc))
                return result
            note_takeover(lock, result, progress)
            if not recover(remote, spec.state_dir, lock, result, progress):
                return result
            if result.recovered:
                remote.prefetched.clear()  # an undo ran: read the files as it left them
                remote.speculated.clear()
            host_seq = next_host_seq(lock.runs)
        if options.check_mode:
            if not _state_dir_writable(remote, spec.state_dir, result, progress):
                return result
            if not preview_recovery(remote, spec.state_dir, result):
                return result
            remote.read_ahead(prefetch_paths(plan))
        _run_steps(remote, plan, options, result, host_seq)
    finally:
        options.cancel.busy.discard(name)
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


def _state_dir_writable(
    remote: RemoteHost, state_dir: str, result: HostResult, progress: Progress
) -> bool:
    """Under --check as a non-root user without become: would the real run's lock be refused?

    --check takes no lock, so without this it said "would change" where the run itself stops
    at ``cannot create state_dir`` (exit 4). One command, only in that case (root and become
    need none), with the same line the run would give.
    """
    if remote.become is not None or remote.login_user == "root":
        return True
    denied = remote.run(state_dir_probe(state_dir), timeout=30).stdout.strip()
    if not denied:
        return True
    error = PermissionDenied(remote.name, f"{state_dir.rstrip('/')}/runs", remote.login_user)
    result.outcome, result.error = "not attempted", str(error)
    progress.host_event(remote.name, str(error))
    return False


def speculative_commands(plan: HostPlan) -> list[str]:
    """The compile checks of the plan's leading file steps, to send with the lock.

    Each answer names the bytes it compiled, and the step uses it only for those bytes, so a
    check sent ahead is never wrong, only unused when the run changed the file first (the
    change run pays one cached check on the host's CPU, ~4 ms, for the re-run's round trip).
    """
    commands: list[str] = []
    for _, entry in plan.steps:
        if action_of(entry) not in FILE_STEPS:
            break
        args = args_of(entry)
        if isinstance(args, VerifyPythonArgs) and args.path.startswith("/"):
            command = speculative_command(args, plan.spec.state_dir)
            if command and command not in commands:
                commands.append(command)
    return commands


def _run_steps(
    remote: RemoteHost, plan: HostPlan, options: RunOptions, result: HostResult, host_seq: int
) -> None:
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
            "host_seq": host_seq,
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
    if not _preflight(remote, spec, ctx, journal, steps, result, progress):
        return
    for position, (index, entry) in enumerate(steps):
        if options.cancel.is_set() and not options.check_mode:
            _cancelled(remote, spec, ctx, journal, result, steps[position:], options)
            return
        step = build_step(entry, index)
        if step.kind not in FILE_STEPS:
            remote.prefetched.clear()
            remote.speculated.clear()
        ctx.step_index = index
        ctx.upcoming = [later for _, later in steps[position + 1 :]]
        progress.step_started(name, index, step.title)
        began = time.monotonic()
        step_result = StepResult(index=index, kind=step.kind, title=step.title, status="ok")
        planned: Planned | None = None
        try:
            with trace.span("step.plan", step.kind):
                planned = step.plan(ctx)
            with trace.span("step.apply", step.kind):
                step.apply(ctx, planned)
            if not options.check_mode or step.runs_in_check_mode:
                with trace.span("step.verify", step.kind):
                    step.verify(ctx, planned)
            step_result.summary = planned.summary
            step_result.figures = planned.figures
            step_result.diff = "".join(change.diff for change in planned.changes) + planned.diff
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
        pending = any(done.status == "would change" for done in result.steps)
        result.outcome = "would change" if result.changed_files or pending else "unchanged"
        return
    if options.cancel.is_set():  # it came during the last step: the run did not complete
        _cancelled(remote, spec, ctx, journal, result, [], options)
        return
    if not ctx.changed:
        for done in result.steps:
            if done.kind == "backup" and done.status == "ok":
                done.status, done.summary = (
                    "unchanged",
                    "nothing changed in this run: no copy needed",
                )
    result.outcome = "changed" if ctx.changed else "unchanged"
    try:
        # The commit point: the run's one wait for writes and records sent without waiting
        # (deploy.remote.hostfiles). A write that failed on the host surfaces here at the
        # latest (the host then skipped the end record and the manifest too), and fails the
        # last step that changed something: the host is rolled back.
        journal.finish(End(outcome="ok"), manifest=_manifest(journal.events))
    except DeployError as exc:
        changed = [done for done in result.steps if done.status == "changed"]
        failed = changed[-1] if changed else result.steps[-1]
        failed.status, failed.summary = "failed", str(exc)
        # Said as it happens, like any failed step: the step was shown "changed" before its
        # write was refused on the host, and the summary does not repeat step errors.
        progress.step_finished(name, failed)
        result.changed_files.clear()
        _fail(remote, spec, ctx, journal, result, failed.index, str(exc), exc, progress)


def _cancelled(
    remote: RemoteHost,
    spec: HostSpec,
    ctx: StepContext,
    journal: Journal,
    result: HostResult,
    steps: list[tuple[int, Any]],
    options: RunOptions,
) -> None:
    """The run was interrupted before ``steps``: none of them runs; undo what changed."""
    reason = options.cancel.reason
    index = steps[0][0] if steps else (result.steps[-1].index + 1 if result.steps else 0)
    where = f"before step {index + 1}" if steps else "before the run's end"
    for later_index, later in steps:
        step = build_step(later, later_index)
        result.steps.append(StepResult(later_index, step.kind, step.title, "not run"))
    if not journal.started:
        result.outcome = "failed"
        result.error = f"{reason} {where}: nothing was changed"
        return
    options.progress.host_event(remote.name, f"{reason}: rolling back the changes made so far")
    _fail(remote, spec, ctx, journal, result, index, reason, StepFailed(reason), options.progress)
    result.failed_step = None
    if result.error:
        result.error = result.error.replace(
            f"step {index + 1} failed: {reason}", f"{reason} {where}", 1
        )


def _preflight(
    remote: RemoteHost,
    spec: HostSpec,
    ctx: StepContext,
    journal: Journal,
    steps: list[tuple[int, Any]],
    result: HostResult,
    progress: Progress,
) -> bool:
    """Every step's read-only pre-checks, before the first step: False (and the host failed,
    nothing touched) if one refuses."""
    for position, (index, entry) in enumerate(steps):
        step = build_step(entry, index)
        ctx.step_index = index
        try:
            step.preflight(ctx)
        except DeployError as exc:
            failed = StepResult(index, step.kind, step.title, "failed", summary=str(exc))
            result.steps.append(failed)
            progress.step_finished(remote.name, failed)
            result.steps.extend(
                StepResult(i, build_step(e, i).kind, build_step(e, i).title, "not run")
                for i, e in steps[position + 1 :]
            )
            _fail(remote, spec, ctx, journal, result, index, str(exc), exc, progress)
            return False
    return True


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
    if not isinstance(exc, HostUnreachable):
        try:
            journal.settle()  # undo what the host recorded, not what was sent
        except HostUnreachable as lost:
            exc = lost
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
        result.rollback = undo_run(
            remote,
            spec.state_dir,
            journal.run_id,
            force=False,
            reason=reason,
            journal=journal,
            note=ctx.note,
        )
        result.outcome = "rolled back"
    except (RollbackFailed, HostUnreachable) as undo_error:
        result.outcome = "rollback failed"
        result.error += f"; ROLLBACK FAILED: {undo_error}"
        journal.close()
    except StepFailed as undo_error:  # the rollback's own records could not be written
        if any(event.get("event") == "intent" for event in journal.events):
            result.outcome = "rollback failed"
            result.error += f"; ROLLBACK FAILED: {undo_error}"
        else:
            # The host recorded no change (a full state_dir refused even the first records):
            # nothing to undo, and an unfinished journal with no intent undoes nothing.
            result.outcome = "rolled back"
            result.error += f"; nothing had been changed (closing the journal failed: {undo_error})"


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
