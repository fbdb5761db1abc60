"""``smoke`` — one real generation: non-empty text, tokens counted, optional regex."""

from __future__ import annotations

import re

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service_client import control, runtime


class SmokeArgs(StrictModel):
    """One POST /generate: non-empty text and completion_tokens > 0, optional regex."""

    service: str = Field(description="A key of the playbook's 'services'.")
    prompt: str = Field(default="The capital of France is", description="Prompt text.")
    expect: str | None = Field(default=None, description="Regular expression the text must match.")
    max_new_tokens: int = Field(default=16, ge=1)
    timeout: float = Field(default=300.0, gt=0)


@register
class SmokeStep(Step[SmokeArgs]):
    kind = "smoke"
    example = """\
- name: One real generation
  smoke: {service: sglang, prompt: "The capital of France is", expect: "(?i)paris"}
"""

    def describe(self) -> str:
        return f"smoke test {self.args.service}"

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
        if not runtime(ctx, args.service).get("started"):
            return Planned(
                summary=f"skipped: {args.service} was not started in this run",
                noop=True,
                skipped=True,
            )
        return Planned(summary=f"POST /generate {args.prompt!r}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        if planned.noop:
            return
        from deploy.services.probes import generate  # the SSH stack: only when it runs

        text, tokens = generate(
            control(ctx, args.service), args.prompt, args.max_new_tokens, args.timeout
        )
        if not text.strip():
            raise CheckFailed(f"{args.service} generated empty text for {args.prompt!r}")
        if tokens <= 0:
            raise CheckFailed(f"{args.service} reported completion_tokens={tokens}")
        if args.expect is not None and not re.search(args.expect, text):
            raise CheckFailed(f"{args.service} answer {text[:80]!r} does not match /{args.expect}/")
        planned.summary = f"{tokens} tokens: {text.strip()[:60]!r}"
        planned.figures["smoke_tokens"] = tokens
