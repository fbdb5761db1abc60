"""``verify_command`` — any command on the host, with an expected exit status and output.

``run`` is the one playbook string that reaches a shell unquoted: it is a command by
definition. It is bounded by ``timeout`` on the host (``timeout -k 5``), not only here.
"""

from __future__ import annotations

import re

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed
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

    def plan(self, ctx: StepContext) -> Planned:
        return Planned(summary=f"run `{self.args.run}`, expect exit {self.args.expect_exit}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        from deploy.remote.host import quote  # the remote layer loads only when a step runs

        args = self.args
        seconds = max(1, round(args.timeout))
        command = f"timeout -k 5 {seconds} sh -c {quote(args.run)}"
        result = ctx.remote.run(command, timeout=args.timeout + 10)
        if result.exit_status == 124 or result.timed_out:
            raise CheckFailed(f"`{args.run}` timed out after {seconds} s")
        if result.exit_status != args.expect_exit:
            raise CheckFailed(
                f"`{args.run}` exited {result.exit_status}, expected {args.expect_exit}: {result.tail(3)}"
            )
        if args.expect_stdout is not None and not re.search(
            args.expect_stdout, result.stdout, re.MULTILINE
        ):
            last = result.stdout.strip().splitlines()[-1:] or ["(empty)"]
            raise CheckFailed(
                f"`{args.run}` output does not match /{args.expect_stdout}/; last line: {last[0]}"
            )
        planned.summary = f"ran `{args.run}`: exit {result.exit_status} as expected"
