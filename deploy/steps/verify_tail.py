"""``verify_tail`` — the file ends with the given lines (blank lines at the end ignored)."""

from __future__ import annotations

from pydantic import Field, model_validator

from deploy.checks.tail import check_tail
from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import read_file


class VerifyTailArgs(StrictModel):
    """Check that the file ends with the given lines."""

    path: str = Field(description="Absolute path of the file on the host.")
    lines: list[str] | None = Field(default=None, description="The last lines, in order.")
    last_line: str | None = Field(default=None, description="Shorthand for one last line.")
    ignore_blank: bool = Field(
        default=True, description="Ignore blank lines at the end of the file."
    )

    @model_validator(mode="after")
    def _one_expectation(self) -> VerifyTailArgs:
        if (self.lines is None) == (self.last_line is None):
            raise ValueError("give exactly one of 'lines' or 'last_line'")
        return self

    def expected(self) -> list[str]:
        return list(self.lines) if self.lines is not None else [str(self.last_line)]


@register
class VerifyTailStep(Step[VerifyTailArgs]):
    kind = "verify_tail"
    example = """\
- name: The file still ends with the EntryClass SGLang loads
  verify_tail:
    path: "{{ model_file }}"
    last_line: "EntryClass = [KimiK25ForConditionalGeneration]"
"""
    runs_in_check_mode = True
    confined = True

    def reads(self) -> list[str]:
        return [self.args.path]

    def answered_locally(self, ctx: StepContext) -> bool:
        # Judged on bytes the run holds (as it wrote them): nothing to wait for.
        return self.args.path in ctx.files

    def describe(self) -> str:
        return f"verify_tail {self.args.path}"

    def plan(self, ctx: StepContext) -> Planned:
        last = self.args.expected()[-1]
        return Planned(summary=f"check the file ends with {last!r}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        content = read_file(ctx, args.path).content
        problems = check_tail(
            content, args.expected(), ignore_blank=args.ignore_blank, path=args.path
        )
        if problems:
            prefix = f"{args.path}: "
            raise CheckFailed(prefix + "; ".join(p.removeprefix(prefix) for p in problems))
        planned.summary = planned.summary.replace("check ", "checked ", 1) + ": ok"
