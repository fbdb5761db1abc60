"""The steps of one run on one host, in order, and the undo when one fails.

`run_steps` is the middle of `deploy.engine.host_run`'s sequence: after the lock and the
recovery, before the lock's release. It gives every step its read-only pre-checks first, then
runs each step's plan, apply and verify, and commits the journal at the end. Any failure, or
a cancel, after the first change leads to `fail`, which rolls the host back from the journal
(`deploy.engine.rollback`) and records what that achieved. Checks the host can judge alone go
with the commit, which the host writes only if they passed (`deploy.engine.verdicts`).
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from deploy import trace
from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.engine.journal import Journal
from deploy.engine.results import HostResult, StepResult
from deploy.engine.rollback import undo_run
from deploy.engine.run_options import Progress, RunOptions, holder_info
from deploy.engine.verdicts import Verdicts
from deploy.errors import CheckFailed, DeployError, HostUnreachable, RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.statedir.records import End
from deploy.steps import build_step
from deploy.steps.base import Planned, StepContext

log = logging.getLogger("deploy.engine")


def run_steps(
    remote: Host, plan: HostPlan, options: RunOptions, result: HostResult, host_seq: int
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
    verdicts = Verdicts(name, ctx, progress)
    for position, (index, entry) in enumerate(steps):
        if options.cancel.is_set() and not options.check_mode:
            verdicts.answered(remote)
            _cancelled(remote, spec, ctx, journal, result, steps[position:], options)
            return
        step = build_step(entry, index)
        if verdicts.pending and not step.answered_locally(ctx):
            # Not expected (a check goes with the commit only in front of steps answered
            # locally), but if so, this step waits for the verdicts, as it would have.
            failed = verdicts.answered(remote)
            if failed is not None:
                _not_run(result, steps[position:])
                reason = failed.summary
                fail(
                    remote,
                    spec,
                    ctx,
                    journal,
                    result,
                    failed.index,
                    reason,
                    CheckFailed(reason),
                    progress,
                )
                return
        if not step.confined:  # it may change files behind what was read ahead
            remote.forget_read_ahead()
        ctx.step_index = index
        ctx.upcoming = [later for _, later in steps[position + 1 :]]
        ctx.checks_with_commit = not options.check_mode and all(
            build_step(later, later_index).answered_locally(ctx)
            for later_index, later in steps[position + 1 :]
        )
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
            earlier = verdicts.answered(remote)  # said first: those steps came first
            result.steps.append(step_result)
            progress.step_finished(name, step_result)
            if not isinstance(exc, DeployError):
                log.error("internal error on %s:\n%s", name, traceback.format_exc())
            _not_run(result, steps[position + 1 :])
            failed_index, reason = index, step_result.summary
            if earlier is not None and not isinstance(exc, HostUnreachable):
                failed_index, reason, exc = (
                    earlier.index,
                    earlier.summary,
                    CheckFailed(earlier.summary),
                )
            fail(remote, spec, ctx, journal, result, failed_index, reason, exc, progress)
            return
        step_result.duration = round(time.monotonic() - began, 3)
        result.steps.append(step_result)
        verdicts.finished(step_result)
    if options.check_mode:
        pending = any(done.status == "would change" for done in result.steps)
        result.outcome = "would change" if result.changed_files or pending else "unchanged"
        return
    if options.cancel.is_set():  # it came during the last step: the run did not complete
        verdicts.answered(remote)
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
        # The commit point: the run's one wait for writes, records and checks sent without
        # waiting (deploy.remote.hostfiles, deploy.engine.verdicts). A write that failed on the
        # host surfaces here at the latest (the host then skipped the end record and the
        # manifest too), and fails the last step that changed something: the host is rolled
        # back. A check that failed made the host skip them too: its step fails (below).
        journal.finish(End(outcome="ok"), manifest=_manifest(journal.events))
    except DeployError as exc:
        verdicts.answered(remote)
        changed = [done for done in result.steps if done.status == "changed"]
        failed = changed[-1] if changed else result.steps[-1]
        failed.status, failed.summary = "failed", str(exc)
        # Said as it happens, like any failed step: the step was shown "changed" before its
        # write was refused on the host, and the summary does not repeat step errors.
        progress.step_finished(name, failed)
        result.changed_files.clear()
        fail(
            remote, spec, ctx, journal, result, failed.index, str(exc), exc, progress,
            at_commit=True,
        )  # fmt: skip
        return
    checked = verdicts.answered(remote)  # no wait: the commit's answers brought theirs
    if checked is not None:  # the host did not commit: undone as after any failed check
        reason = checked.summary
        fail(
            remote, spec, ctx, journal, result, checked.index, reason, CheckFailed(reason), progress
        )


def _not_run(result: HostResult, steps: list[tuple[int, Any]]) -> None:
    """Record ``steps`` as not run (a step before them failed)."""
    for index, entry in steps:
        step = build_step(entry, index)
        result.steps.append(StepResult(index, step.kind, step.title, "not run"))


def _cancelled(
    remote: Host,
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
    fail(remote, spec, ctx, journal, result, index, reason, StepFailed(reason), options.progress)
    result.failed_step = None
    if result.error:
        result.error = result.error.replace(
            f"step {index + 1} failed: {reason}", f"{reason} {where}", 1
        )


def _preflight(
    remote: Host,
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
            fail(remote, spec, ctx, journal, result, index, str(exc), exc, progress)
            return False
    return True


def fail(
    remote: Host,
    spec: HostSpec,
    ctx: StepContext,
    journal: Journal,
    result: HostResult,
    index: int,
    reason: str,
    exc: BaseException,
    progress: Progress,
    *,
    at_commit: bool = False,
) -> None:
    """Fail the run at step ``index`` and roll the host back (``at_commit``: the failure came
    while the commit, sent behind the run's last checks, was being answered)."""
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
        if at_commit:  # the commit had been sent: the host may have written it
            result.error += (
                "; the connection was lost while the host committed: it either committed "
                "(every check passed) or keeps an unfinished journal that the next `deploy "
                "apply` or `deploy rollback` undoes; `deploy status` says which"
            )
        else:
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
