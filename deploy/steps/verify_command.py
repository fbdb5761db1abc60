"""``verify_command`` — any command on the host, with an expected exit status and output.

``run`` is the one playbook string that reaches a shell unquoted: it is a command by
definition. It is bounded by ``timeout`` on the host (``timeout -k 5``), not only here.

Expecting exit 0 and no particular output, its verdict is the command's exit status, which
the host can judge alone: such a check goes with the commit (`StepContext.check_on_host`)
when nothing after it needs an answer. Expecting output (a Python regular expression, matched
here) or another status, it is run and waited for, as before.
"""

from __future__ import annotations

import re

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed, CommandResult
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext


class VerifyCommandArgs(StrictModel):
    """Run a shell command on the host and check its exit status and output."""

    run: str = Field(description="Shell command, run as written (the one unquoted string).")
    expect_exit: int = Field(default=0, description="Required exit status.")
    expect_stdout: str | None = Field(
        default=None, description="Regular expression that must match somewhere in stdout."
    )
    timeout: float = Field(default=300.0, gt=0, description="Seconds before the command is killed.")


@register
class VerifyCommandStep(Step[VerifyCommandArgs]):
    kind = "verify_command"
    example = """\
- name: The draft model is on the host
  verify_command:
    run: test -f /models/kimi-eagle3-draft/config.json && echo present
    expect_stdout: present
    timeout: 30
"""
    runs_in_check_mode = False  # an arbitrary command may have side effects

    def describe(self) -> str:
        return f"verify_command {self.args.run[:50]}"

    def _by_exit_status(self) -> bool:
        """Whether the host can judge it alone: exit 0 expected, nothing to match."""
        return self.args.expect_exit == 0 and self.args.expect_stdout is None

    def answered_locally(self, ctx: StepContext) -> bool:
        return self._by_exit_status()

    def plan(self, ctx: StepContext) -> Planned:
        return Planned(summary=f"run `{self.args.run}`, expect exit {self.args.expect_exit}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        from deploy.remote.host import quote  # the remote layer loads only when a step runs

        args = self.args
        seconds = max(1, round(args.timeout))
        command = f"timeout -k 5 {seconds} sh -c {quote(args.run)}"

        def explain(status: int, out: str, err: str) -> str:
            problem = self._judged(CommandResult(command, status, out, err))
            return problem or f"ran `{args.run}`: exit {status} as expected"

        if self._by_exit_status() and ctx.check_on_host(
            command, timeout=args.timeout + 10, explain=explain
        ):
            planned.summary = f"sent `{args.run}` with the commit, expecting exit 0"
            return
        result = ctx.remote.run(command, timeout=args.timeout + 10)
        problem = self._judged(result)
        if problem:
            raise CheckFailed(problem)
        planned.summary = f"ran `{args.run}`: exit {result.exit_status} as expected"

    def _judged(self, result: CommandResult) -> str | None:
        """Why the command's result fails the check, or None when it passes."""
        args = self.args
        seconds = max(1, round(args.timeout))
        if result.exit_status == 124 or result.timed_out:
            return f"`{args.run}` timed out after {seconds} s"
        if result.exit_status != args.expect_exit:
            return f"`{args.run}` exited {result.exit_status}, expected {args.expect_exit}: {result.tail(3)}"
        if args.expect_stdout is not None and not re.search(
            args.expect_stdout, result.stdout, re.MULTILINE
        ):
            last = result.stdout.strip().splitlines()[-1:] or ["(empty)"]
            return (
                f"`{args.run}` output does not match /{args.expect_stdout}/; last line: {last[0]}"
            )
        return None
