"""``verify_tail`` — the file ends with the given lines (blank lines at the end ignored)."""

from __future__ import annotations

from deploy.checks.tail import check_tail
from deploy.config.steps import VerifyTailArgs
from deploy.errors import CheckFailed
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import read_file


class VerifyTailStep(Step):
    kind = "verify_tail"
    runs_in_check_mode = True

    def describe(self) -> str:
        assert isinstance(self.args, VerifyTailArgs)
        return f"verify_tail {self.args.path}"

    def plan(self, ctx: StepContext) -> Planned:
        assert isinstance(self.args, VerifyTailArgs)
        last = self.args.expected()[-1]
        return Planned(summary=f"check the file ends with {last!r}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        assert isinstance(args, VerifyTailArgs)
        content = read_file(ctx, args.path).content
        problems = check_tail(
            content, args.expected(), ignore_blank=args.ignore_blank, path=args.path
        )
        if problems:
            prefix = f"{args.path}: "
            raise CheckFailed(prefix + "; ".join(p.removeprefix(prefix) for p in problems))
        planned.summary = planned.summary.replace("check ", "checked ", 1) + ": ok"
