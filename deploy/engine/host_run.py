"""One run of a playbook on one host: lock → recover → steps → (rollback) → commit.

The sequence is the product's promise in code: take the host's lock (or leave it untouched),
undo any run a crash left unfinished, run the steps in order, and if anything fails after the
first change, undo every change in reverse order before reporting. The engine never decides
exit codes; it records outcomes (see `deploy.engine.results`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from deploy import ablation
from deploy.config.resolve import HostPlan
from deploy.engine.recovery import note_takeover, preview_recovery, recover
from deploy.engine.results import HostResult, StepResult
from deploy.engine.run_options import (
    Cancel,
    NoProgress,
    Progress,
    RunOptions,
    connect_settings,
    holder_info,
    ssh_host,
)
from deploy.engine.step_run import run_steps
from deploy.errors import (
    DeployError,
    HostNotAttempted,
    InputError,
    PermissionDenied,
)
from deploy.remote.api import Host
from deploy.remote.lock import HostLock, acquire
from deploy.statedir.layout import Layout
from deploy.statedir.runs import next_host_seq
from deploy.steps import build_step

__all__ = [
    "Cancel",
    "NoProgress",
    "Progress",
    "RunOptions",
    "apply_host",
    "connect_settings",
    "holder_info",
    "read_ahead",
    "ssh_host",
]


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
    remote = options.open_host(name, spec, options.accept_new_host_keys)
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
    paths, commands = read_ahead(plan)
    options.cancel.busy.add(name)
    try:
        if not options.check_mode:
            try:
                lock = acquire(
                    remote,
                    spec.state_dir,
                    holder_info(options.run_id, options.playbook),
                    prefetch=paths,
                    speculate=commands,
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
                remote.forget_read_ahead()  # an undo ran: read the files as it left them
            host_seq = next_host_seq(lock.runs)
        if options.check_mode:
            try:
                if not _state_dir_writable(remote, spec.state_dir, result, progress):
                    return result
                if not preview_recovery(remote, spec.state_dir, result):
                    return result
            except HostNotAttempted as exc:
                # --check takes no lock, so the first thing done as the become user is this
                # read: a refused sudo (a rotated password) is "not attempted" (exit 4) in one
                # line, as the real run's lock says it, never an internal error.
                result.outcome, result.error = "not attempted", str(exc)
                progress.host_event(name, str(exc))
                return result
            remote.read_ahead(paths)
        run_steps(remote, plan, options, result, host_seq)
    finally:
        options.cancel.busy.discard(name)
        if lock is not None:
            lock.release()
        result.ops = dict(remote.ops)
        remote.close()
        result.duration = round(time.monotonic() - began, 3)
    return result


def read_ahead(plan: HostPlan) -> tuple[list[str], list[str]]:
    """What the host may fetch and run with the lock: the files the plan's leading confined
    steps read (`Step.reads`), in order, and the commands they can use ahead
    (`Step.speculate`).

    A confined step touches nothing but the files it names (and runs only its own checks), so
    what it reads is the same whether fetched now or when it runs. Any other step (a command,
    a service) may change files: it ends that prefix, and what was fetched and not yet read
    is dropped before it runs (`deploy.engine.step_run`). A speculated check's answer names
    the bytes it is about, and the step uses it only for those bytes, so a check sent ahead
    is never wrong, only unused when the run changed the file first (the change run pays one
    cached check on the host's CPU, ~4 ms, for the re-run's round trip).
    """
    paths: list[str] = []
    commands: list[str] = []
    if ablation.off("readahead"):
        return paths, commands
    for index, entry in plan.steps:
        step = build_step(entry, index)
        if not step.confined:
            break
        paths.extend(p for p in step.reads() if p.startswith("/") and p not in paths)
        commands.extend(c for c in step.speculate(plan.spec.state_dir) if c not in commands)
    return paths, commands


def _state_dir_writable(
    remote: Host, state_dir: str, result: HostResult, progress: Progress
) -> bool:
    """Under --check as a non-root user without become: would the real run's lock be refused?

    --check takes no lock, so without this it said "would change" where the run itself stops
    at ``cannot create state_dir`` (exit 4). One command, only in that case (root and become
    need none), with the same line the run would give.
    """
    if remote.become is not None or remote.login_user == "root":
        return True
    denied = remote.run(Layout(state_dir).write_probe(), timeout=30).stdout.strip()
    if not denied:
        return True
    error = PermissionDenied(remote.name, f"{state_dir.rstrip('/')}/runs", remote.login_user)
    result.outcome, result.error = "not attempted", str(error)
    progress.host_event(remote.name, str(error))
    return False
