"""Checks judged with the commit: after the lock, a change run waits once (issue 17).

A check whose verdict is its exit status on the host — verify_python's compile of the new
bytes — needs no round trip of its own. The step sends it to the lock's shell as a ``CHECK``
(`StepContext.check_on_host`), behind the writes it checks, and the commit (manifest, then the
``end`` record, fsynced as always) goes right behind it. The host's session skips everything sent after a failed request or a
failed check (`deploy.remote.session`), so the ``end`` record is written only if every write,
record and check before it succeeded; the client waits once for all of it and learns from the
answers whether the run committed.

A step sends its check this way only when every step after it waits for no answer from the
host (`Step.answered_locally`: it judges bytes the run holds, or sends a check of its own), so
a check is answered with the commit or with a failure's undo, and no step acts on the host
before the verdict of a check in front of it is known. A check whose verdict needs the client
(output matched here, a service's health, a throughput gate) is waited for where it runs, as
before, and the commit follows it.

Only deploy's own short checks go this way, never a playbook's command (``verify_command``),
even one judged by its exit status alone: once the commit is sent, a cancel (``--timeout``, a
first SIGINT) that comes while the batch is answered no longer stops it — the host commits if
the checks pass, as it did when a cancel came during the commit's own round trip. For the
compile that window grows by milliseconds; a command may run for minutes (and change the
host), and a cancel during it must still roll back (issue 13).

When a check failed, the host skipped the manifest and the ``end`` record: the engine fails
that step and rolls the host back from the journal, exactly as after a check it had waited
for. When the connection is lost with the checks unanswered, the host holds either a
committed run (every check passed) or an unfinished journal that the next run or ``deploy
rollback`` undoes, as after any lost connection.

`Verdicts` holds the results of the steps from the first such check on until their answers
came, so that they are said in order, each with its verdict.
"""

from __future__ import annotations

import contextlib

from deploy.engine.results import StepResult
from deploy.engine.run_options import Progress
from deploy.errors import DeployError
from deploy.remote.api import Host
from deploy.steps.base import HostCheck, StepContext


class Verdicts:
    """The checks of one run on one host that go with the commit, and the results held."""

    def __init__(self, host: str, ctx: StepContext, progress: Progress) -> None:
        self.host, self.ctx, self.progress = host, ctx, progress
        #: Finished steps not said yet: a check sent by or before them is unanswered.
        self.held: list[StepResult] = []

    @property
    def pending(self) -> bool:
        return bool(self.held or self.ctx.host_checks)

    def finished(self, result: StepResult) -> None:
        """Say a finished step, or hold it while a check sent by or before it is unanswered."""
        if self.pending:
            self.held.append(result)
        else:
            self.progress.step_finished(self.host, result)

    def answered(self, remote: Host) -> StepResult | None:
        """Wait for the checks' answers (no round trip if the commit already did), judge
        them, say the held steps in order; return the first step whose check failed.

        A failed write or a lost connection is not raised here: it is the caller's failure
        (the commit's, or the step's that was failing), and a check it left unanswered makes
        its step "not run".
        """
        if not self.pending:
            return None
        with contextlib.suppress(DeployError):
            remote.flush()
        failed: StepResult | None = None
        for result in self.held:
            for check in self.ctx.host_checks:
                if check.step_index == result.index and _judge(result, check):
                    failed = failed or result
            self.progress.step_finished(self.host, result)
        self.held.clear()
        self.ctx.host_checks.clear()
        return failed


def _judge(result: StepResult, check: HostCheck) -> bool:
    """Set the step's status and summary from its check's answer; True if the check failed.

    The verdict is the exit status alone, as the host judged it when it skipped (or wrote)
    the commit record: the step's ``explain`` words it and cannot reverse it.
    """
    answer = check.call.answer
    if answer is None or answer.get("skipped") or "status" not in answer:
        if result.status != "failed":
            result.status = "not run"
            result.summary += (
                "; the check did not run: something sent before it failed on the host"
                if answer
                else "; no answer from the host (the connection was lost)"
            )
        return False
    status = int(answer["status"])
    stdout = check.call.payload.decode("utf-8", "replace")  # a shell command's, as every check
    result.summary = check.explain(status, stdout, str(answer.get("stderr", "")))
    if status == 0:
        return False
    result.status = "failed"
    return True
