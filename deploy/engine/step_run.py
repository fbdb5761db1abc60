"""The steps of one run on one host, in named phases, and the undo when one fails.

`run_steps` is the middle of `deploy.engine.host_run`'s sequence: after the lock and the
recovery, before the lock's release. A run goes through these phases (`Phase`):

preflight
    every step's read-only pre-checks (`Step.preflight`): a host that cannot be served is
    refused with nothing touched. Under ``--check`` the steps in front of the refusing one
    are still planned, so the plan shows their changes (diffs) beside the refusal.
before first change
    every step's `Step.before_first_change`, once, just before the run's first change to the
    host (the first file written or server stopped: `StepContext.first_change`), never under
    ``--check`` or in a run that changes nothing — the throughput gate's baseline on the old
    server is measured here, so no step looks ahead for another.
change
    each step's plan and apply, in order.
verify
    each step's verify, right after its apply (a health wait or a gate after a restart).
commit
    the journal's end record and manifest, which the host writes only if the checks sent with
    it passed (`deploy.engine.verdicts`).

Any failure, or a cancel, after the first change leads to `deploy.engine.step_fail.fail`, which rolls the host back
from the journal (`deploy.engine.rollback`) and records what that achieved.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from deploy import trace
from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.engine.journal import Journal
from deploy.engine.results import HostResult, StepResult
from deploy.engine.run_options import Progress, RunOptions, holder_info
from deploy.engine.step_fail import cancelled as _cancelled
from deploy.engine.step_fail import fail
from deploy.engine.verdicts import Verdicts
from deploy.errors import (
    CheckFailed,
    DeployError,
    HostUnreachable,
    Interrupted,
    NothingTouched,
    ServiceUnsupported,
)
from deploy.remote.api import Host
from deploy.statedir.records import End
from deploy.steps import build_step
from deploy.steps.base import Planned, Step, StepContext

log = logging.getLogger("deploy.engine")


class Phase(StrEnum):
    """The engine's phases of a run on one host, in order (`StepContext.phase`)."""

    PREFLIGHT = "preflight"
    BEFORE_FIRST_CHANGE = "before first change"
    CHANGE = "change"
    VERIFY = "verify"
    COMMIT = "commit"


@dataclass
class _Run:
    """One run on one host: what every phase needs."""

    remote: Host
    spec: HostSpec
    options: RunOptions
    result: HostResult
    ctx: StepContext
    journal: Journal
    steps: list[tuple[int, Any]]
    verdicts: Verdicts

    @property
    def progress(self) -> Progress:
        return self.options.progress

    def fail(self, index: int, reason: str, exc: BaseException, *, at_commit: bool = False) -> None:
        fail(
            self.remote, self.spec, self.ctx, self.journal, self.result, index, reason, exc,
            self.progress, at_commit=at_commit,
        )  # fmt: skip


def run_steps(
    remote: Host, plan: HostPlan, options: RunOptions, result: HostResult, host_seq: int
) -> None:
    run = _begin(remote, plan, options, result, host_seq)
    refused = _preflight(run)
    if refused is not None:
        position, exc = refused
        earlier = run.steps[:position]
        if options.check_mode:  # what --check is for: every change, and why the run would stop
            _plan_in_front(run, position)
        else:  # listed, so that the table shows the whole playbook
            _not_run(result, earlier)
        _refuse(run, position, exc)
        return
    run.ctx.on_first_change = lambda: _before_first_change(run)
    for position, (index, entry) in enumerate(run.steps):
        if not _run_step(run, position, index, entry):
            return
    _finish(run)


def _plan_in_front(run: _Run, refused_at: int) -> None:
    """Under ``--check``, plan the steps in front of a refused one. One that fails to plan is
    shown failed and ends the planning, but it does not decide the host's outcome: the real
    run would be refused before it ran (`_refuse` then says the refusal, as apply would)."""
    result = run.result
    first = len(result.steps)
    for at, (index, entry) in enumerate(run.steps[:refused_at]):
        if not _run_step(run, at, index, entry):
            # It listed every later step "not run": those from the refused one on are
            # `_refuse`'s to list, after its failure line.
            del result.steps[first + refused_at :]
            result.failed_step = None
            result.error = None
            break
    result.changed_files.clear()  # refused first: the run would change none of them


def _begin(
    remote: Host, plan: HostPlan, options: RunOptions, result: HostResult, host_seq: int
) -> _Run:
    """The run's journal (started by its first record) and the context its steps share."""
    name, spec = remote.name, plan.spec
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
        progress=options.progress,
        run_id=options.run_id,
        services=dict(plan.services),
        force=options.force,
    )
    verdicts = Verdicts(name, ctx, options.progress)
    return _Run(remote, spec, options, result, ctx, journal, list(plan.steps), verdicts)


def _before_first_change(run: _Run) -> None:
    """The "before the first change" phase: every step's `Step.before_first_change`, with
    the step index each one's own (a failure fails the step about to make the change)."""
    ctx = run.ctx
    phase, index = ctx.phase, ctx.step_index
    ctx.phase = Phase.BEFORE_FIRST_CHANGE.value
    try:
        for later_index, entry in run.steps:
            step = build_step(entry, later_index)
            ctx.step_index = later_index
            with trace.span("step.before_first_change", step.kind):
                step.before_first_change(ctx)
    finally:
        ctx.phase, ctx.step_index = phase, index
    if run.options.cancel.is_set():  # came while the old server was measured: change nothing
        raise Interrupted(
            f"{run.options.cancel.reason} before the first change: nothing was changed"
        )


def _run_step(run: _Run, position: int, index: int, entry: Any) -> bool:
    """One step's change and verify phases; False when the run stops here (failed, cancelled,
    or a check sent before it failed), the host then rolled back."""
    remote, ctx, options, result = run.remote, run.ctx, run.options, run.result
    if options.cancel.is_set() and not options.check_mode:
        run.verdicts.answered(remote)
        _cancelled(remote, run.spec, ctx, run.journal, result, run.steps[position:], options)
        return False
    step = build_step(entry, index)
    if run.verdicts.pending and not step.answered_locally(ctx):
        # Not expected (a check goes with the commit only in front of steps answered
        # locally), but if so, this step waits for the verdicts, as it would have.
        failed = run.verdicts.answered(remote)
        if failed is not None:
            _not_run(result, run.steps[position:])
            run.fail(failed.index, failed.summary, CheckFailed(failed.summary))
            return False
    if not step.confined:  # it may change files behind what was read ahead, or cached
        remote.forget_read_ahead()
        ctx.files_may_change()
    ctx.step_index = index
    ctx.checks_with_commit = not options.check_mode and all(
        build_step(later, later_index).answered_locally(ctx)
        for later_index, later in run.steps[position + 1 :]
    )
    run.progress.step_started(remote.name, index, step.title)
    began = time.monotonic()
    step_result = StepResult(index=index, kind=step.kind, title=step.title, status="ok")
    planned: Planned | None = None
    try:
        ctx.phase = Phase.CHANGE.value
        with trace.span("step.plan", step.kind):
            planned = step.plan(ctx)
        with trace.span("step.apply", step.kind):
            step.apply(ctx, planned)
        ctx.phase = Phase.VERIFY.value
        if not options.check_mode or step.runs_in_check_mode:
            with trace.span("step.verify", step.kind):
                step.verify(ctx, planned)
        _record(run, step, planned, step_result)
    except Exception as exc:  # every failure, expected or not, must lead to the undo
        step_result.duration = round(time.monotonic() - began, 3)
        _step_failed(run, position, step_result, planned, exc)
        return False
    step_result.duration = round(time.monotonic() - began, 3)
    result.steps.append(step_result)
    run.verdicts.finished(step_result)
    return True


def _record(run: _Run, step: Step[Any], planned: Planned, step_result: StepResult) -> None:
    """What a step that ran reports: its summary, figures, diff and status."""
    check_mode, result = run.options.check_mode, run.result
    step_result.summary = planned.summary
    step_result.figures = planned.figures
    step_result.diff = "".join(change.diff for change in planned.changes) + planned.diff
    if planned.changes:
        step_result.status = "would change" if check_mode else "changed"
        result.changed_files.extend(
            c.path for c in planned.changes if c.path not in result.changed_files
        )
    elif check_mode and step.mutating and not planned.noop:
        step_result.status = "would change"
    elif planned.skipped:
        step_result.status = "skipped"
    elif planned.noop:
        step_result.status = "unchanged"
    elif check_mode and not step.runs_in_check_mode and not step.mutating:
        step_result.status = "skipped"


def _step_failed(
    run: _Run,
    position: int,
    step_result: StepResult,
    planned: Planned | None,
    exc: Exception,
) -> None:
    """A step raised: say so, mark the rest not run, and fail the run there (or at an
    earlier step whose check, sent with the commit, failed first)."""
    name, result, index = run.remote.name, run.result, step_result.index
    step_result.status = "failed"
    if planned is not None:  # what a failed check measured (a gate's figures)
        step_result.figures = planned.figures
    step_result.summary = str(exc) if isinstance(exc, DeployError) else f"internal error: {exc!r}"
    earlier = run.verdicts.answered(run.remote)  # said first: those steps came first
    result.steps.append(step_result)
    run.progress.step_finished(name, step_result)
    if not isinstance(exc, DeployError):
        log.error("internal error on %s:\n%s", name, traceback.format_exc())
    _not_run(result, run.steps[position + 1 :])
    failed_index, reason, cause = index, step_result.summary, exc
    if earlier is not None and not isinstance(exc, HostUnreachable):
        failed_index, reason, cause = earlier.index, earlier.summary, CheckFailed(earlier.summary)
    run.fail(failed_index, reason, cause)


def _finish(run: _Run) -> None:
    """After the last step: the outcome under --check, a late cancel, or the commit."""
    result, ctx = run.result, run.ctx
    if run.options.check_mode:
        pending = any(done.status == "would change" for done in result.steps)
        result.outcome = "would change" if result.changed_files or pending else "unchanged"
        return
    if run.options.cancel.is_set():  # it came during the last step: the run did not complete
        run.verdicts.answered(run.remote)
        _cancelled(run.remote, run.spec, ctx, run.journal, result, [], run.options)
        return
    if not ctx.changed:
        for done in result.steps:
            if done.kind == "backup" and done.status == "ok":
                done.status, done.summary = (
                    "unchanged",
                    "nothing changed in this run: no copy needed",
                )
    result.outcome = "changed" if ctx.changed else "unchanged"
    _commit(run)


def _commit(run: _Run) -> None:
    """The commit phase: the run's one wait for writes, records and checks sent without
    waiting (deploy.remote.hostfiles, deploy.engine.verdicts). A write that failed on the
    host surfaces here at the latest (the host then skipped the end record and the manifest
    too), and fails the last step that changed something: the host is rolled back. A check
    that failed made the host skip them too: its step fails, and the host is rolled back."""
    run.ctx.phase = Phase.COMMIT.value
    result = run.result
    try:
        run.journal.finish(End(outcome="ok"), manifest=_manifest(run.journal.events))
    except DeployError as exc:
        run.verdicts.answered(run.remote)
        changed = [done for done in result.steps if done.status == "changed"]
        failed = changed[-1] if changed else result.steps[-1]
        failed.status, failed.summary = "failed", str(exc)
        # Said as it happens, like any failed step: the step was shown "changed" before its
        # write was refused on the host, and the summary does not repeat step errors.
        run.progress.step_finished(run.remote.name, failed)
        result.changed_files.clear()
        run.fail(failed.index, str(exc), exc, at_commit=True)
        return
    checked = run.verdicts.answered(run.remote)  # no wait: the commit's answers brought theirs
    if checked is not None:  # the host did not commit: undone as after any failed check
        run.fail(checked.index, checked.summary, CheckFailed(checked.summary))


def _not_run(result: HostResult, steps: list[tuple[int, Any]]) -> None:
    """Record ``steps`` as not run (a step before them failed)."""
    for index, entry in steps:
        step = build_step(entry, index)
        result.steps.append(StepResult(index, step.kind, step.title, "not run"))


def _preflight(run: _Run) -> tuple[int, DeployError] | None:
    """Every step's read-only pre-checks, before the first step: the position of the first
    step that refuses, and why (None: none does)."""
    for position, (index, entry) in enumerate(run.steps):
        step = build_step(entry, index)
        run.ctx.step_index = index
        try:
            step.preflight(run.ctx)
        except DeployError as exc:
            return position, exc
    return None


def _refuse(run: _Run, position: int, exc: DeployError) -> None:
    """The host refused by the step at ``position``'s pre-checks: that step failed, the rest
    not run, the host failed with nothing touched (a server deploy will not serve, or a
    `NothingTouched` refusal: "not attempted", exit 4)."""
    result, (index, entry) = run.result, run.steps[position]
    step = build_step(entry, index)
    failed = StepResult(index, step.kind, step.title, "failed", summary=str(exc))
    result.steps.append(failed)
    run.progress.step_finished(run.remote.name, failed)
    _not_run(result, run.steps[position + 1 :])
    if isinstance(exc, ServiceUnsupported):
        result.outcome, result.error = "not attempted", str(exc)
        return
    run.fail(index, str(exc), exc)
    if isinstance(exc, NothingTouched) and result.outcome == "failed":
        result.outcome = "not attempted"  # exit 4: the operator's server untouched


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
