"""``verify_command`` — any command on the host, with an expected exit status and output.

``run`` is the one playbook string that reaches a shell unquoted: it is a command by
definition. It is bounded by ``timeout`` on the host (``timeout -k 5``), not only here.
"""

from __future__ import annotations

import re

from deploy.config.steps import VerifyCommandArgs
from deploy.errors import CheckFailed
from deploy.remote.host import quote
from deploy.steps.base import Planned, Step, StepContext


class VerifyCommandStep(Step):
    kind = "verify_command"
    runs_in_check_mode = False  # an arbitrary command may have side effects

    def describe(self) -> str:
        assert isinstance(self.args, VerifyCommandArgs)
        return f"verify_command {self.args.run[:50]}"

    def plan(self, ctx: StepContext) -> Planned:
        assert isinstance(self.args, VerifyCommandArgs)
        return Planned(summary=f"run `{self.args.run}`, expect exit {self.args.expect_exit}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        assert isinstance(args, VerifyCommandArgs)
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
