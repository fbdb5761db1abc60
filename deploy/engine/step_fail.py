"""The undo when a run on one host fails or is cancelled after it changed something.

`deploy.engine.step_run` runs the phases; any failure after the first change, or a cancel,
comes here: `fail` rolls the host back from the journal (`deploy.engine.rollback`) and records
in the host's result what that achieved — rolled back, or a rollback that failed and needs a
human (exit 3). A connection lost mid-run leaves the unfinished journal for the next `apply`
or `rollback` to undo.
"""

from __future__ import annotations

from typing import Any

from deploy.config.inventory import HostSpec
from deploy.engine.journal import Journal
from deploy.engine.results import HostResult, StepResult
from deploy.engine.rollback import undo_run
from deploy.engine.run_options import Progress, RunOptions
from deploy.errors import HostNotAttempted, HostUnreachable, RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.steps import build_step
from deploy.steps.base import StepContext


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
        # Refused before anything was touched (a preflight's `HostNotAttempted`): exit 4.
        result.outcome = "not attempted" if isinstance(exc, HostNotAttempted) else "failed"
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


def cancelled(
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
