"""``smoke`` — one real generation: non-empty text, tokens counted, optional regex."""

from __future__ import annotations

import re

from deploy.config.steps import SmokeArgs
from deploy.errors import CheckFailed
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service import control, runtime


class SmokeStep(Step):
    kind = "smoke"

    def describe(self) -> str:
        assert isinstance(self.args, SmokeArgs)
        return f"smoke test {self.args.service}"

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
        assert isinstance(args, SmokeArgs)
        if not runtime(ctx, args.service).get("started"):
            return Planned(
                summary=f"skipped: {args.service} was not started in this run",
                noop=True,
                skipped=True,
            )
        return Planned(summary=f"POST /generate {args.prompt!r}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        assert isinstance(args, SmokeArgs)
        if planned.noop:
            return
        text, tokens = control(ctx, args.service).generate(
            args.prompt, args.max_new_tokens, args.timeout
        )
        if not text.strip():
            raise CheckFailed(f"{args.service} generated empty text for {args.prompt!r}")
        if tokens <= 0:
            raise CheckFailed(f"{args.service} reported completion_tokens={tokens}")
        if args.expect is not None and not re.search(args.expect, text):
            raise CheckFailed(f"{args.service} answer {text[:80]!r} does not match /{args.expect}/")
        planned.summary = f"{tokens} tokens: {text.strip()[:60]!r}"
        planned.figures["smoke_tokens"] = tokens
