"""``gate_throughput`` — the new server must be fast enough, absolutely and against before.

Output tokens per second of a short concurrent load against ``/generate`` (completion tokens
over wall time). With ``baseline: before`` the same load was measured on the old server just
before the restart (see `deploy.steps.service`), and the new one must reach ``min_ratio`` of it.
This is the check that would have caught EAGLE-3 running at 54.1 tok/s, slower than without it.
When there was no old server to measure, only ``min_tokens_per_s`` applies, and the report says
so.
"""

from __future__ import annotations

from deploy.config.steps import GateThroughputArgs
from deploy.errors import CheckFailed
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service import control, runtime


class GateThroughputStep(Step):
    kind = "gate_throughput"

    def describe(self) -> str:
        assert isinstance(self.args, GateThroughputArgs)
        return f"throughput gate on {self.args.service}"

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
        assert isinstance(args, GateThroughputArgs)
        if not runtime(ctx, args.service).get("started"):
            return Planned(
                summary=f"skipped: {args.service} was not started in this run",
                noop=True,
                skipped=True,
            )
        return Planned(
            summary=f"{args.requests} requests x {args.max_new_tokens} tokens, {args.concurrency} at a time"
        )

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        assert isinstance(args, GateThroughputArgs)
        if planned.noop:
            return
        facts = runtime(ctx, args.service)
        ctx.note(f"measuring {args.service} throughput")
        now = control(ctx, args.service).throughput(
            requests=args.requests,
            concurrency=args.concurrency,
            max_new_tokens=args.max_new_tokens,
            prompt=args.prompt,
            timeout=args.timeout,
        )
        planned.figures["tokens_per_s"] = now
        before = facts.get("baseline")
        problems = []
        parts = [f"{now:g} tok/s"]
        if args.min_tokens_per_s is not None and now < args.min_tokens_per_s:
            problems.append(f"{now:g} tok/s is below the floor of {args.min_tokens_per_s:g}")
        if args.baseline == "before":
            if isinstance(before, float | int):
                ratio = round(now / before, 3) if before else 0.0
                planned.figures["before_tokens_per_s"] = before
                planned.figures["ratio"] = ratio
                parts.append(f"before {before:g} tok/s (x{ratio:g}, need x{args.min_ratio:g})")
                if ratio < args.min_ratio:
                    problems.append(
                        f"{now:g} tok/s is x{ratio:g} of the {before:g} tok/s before the change "
                        f"(need x{args.min_ratio:g})"
                    )
            else:
                parts.append(f"no baseline: {facts.get('baseline_note', 'not measured')}")
        if problems:
            raise CheckFailed(f"throughput gate failed for {args.service}: " + "; ".join(problems))
        planned.summary = ", ".join(parts)
