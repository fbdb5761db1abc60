"""``gate_throughput`` — the new server must be fast enough, absolutely and against before.

Output tokens per second at concurrency 1 and at a higher level (`deploy.steps.gate_load`: an
uncounted warm-up, then at least 3 samples per level, ``ignore_eos``, tokens from the server's
``meta_info.completion_tokens``), judged by `deploy.checks.throughput`: medians, ``min_ratio``
within ``tolerance`` of the figures measured on the old server just before the restart
(``baseline: before``, see `deploy.steps.service`), and ``min_tokens_per_s`` at concurrency 1.
This is the check that catches EAGLE-3 running at 54.1 tok/s where the server it replaced made
75. With no old server to measure, the gate fails unless ``min_tokens_per_s`` is set.
"""

from __future__ import annotations

from deploy.checks.throughput import judge, levels_from_records
from deploy.config.steps import GateThroughputArgs
from deploy.errors import CheckFailed
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.gate_load import measure
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
        levels = " and ".join(str(c) for c in args.levels())
        return Planned(
            summary=(
                f"{args.warmup} warm-up requests, then {args.samples} samples at concurrency "
                f"{levels}, {args.max_new_tokens} tokens each"
            )
        )

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        assert isinstance(args, GateThroughputArgs)
        if planned.noop:
            return
        facts = runtime(ctx, args.service)
        ctx.note(f"measuring {args.service} throughput")
        after = measure(control(ctx, args.service), args, ctx.note)
        verdict = judge(
            after,
            levels_from_records(facts.get("baseline")),
            baseline=args.baseline == "before",
            min_ratio=args.min_ratio,
            tolerance=args.tolerance,
            min_tokens_per_s=args.min_tokens_per_s,
            no_baseline_reason=str(facts.get("baseline_note", "not measured")),
        )
        planned.figures.update(verdict.figures)
        planned.summary = verdict.summary
        if not verdict.passed:
            raise CheckFailed(
                f"throughput gate failed for {args.service}: "
                + "; ".join(verdict.problems)
                + f" [{verdict.summary}]"
            )
