"""``gate_throughput`` — the new server must be fast enough, absolutely and against before.

Output tokens per second at concurrency 1 and at a higher level (`deploy.services.load`: an
uncounted warm-up, then at least 3 samples per level, ``ignore_eos``, tokens from the server's
``meta_info.completion_tokens``), judged by `deploy.checks.throughput`: medians, ``min_ratio``
within ``tolerance`` of the figures measured on the old server before the run's first change
(``baseline: before``: the engine's "before the first change" phase), and ``min_tokens_per_s``
at concurrency 1.
This is the check that catches EAGLE-3 running at 54.1 tok/s where the server it replaced made
75. With no old server to measure, the gate fails unless ``min_tokens_per_s`` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from deploy.checks.throughput import (
    DEFAULT_TOLERANCE,
    concurrency_levels,
    judge,
    levels_from_records,
)
from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service_client import control, runtime

if TYPE_CHECKING:
    from deploy.services.load import LoadSpec


class GateThroughputArgs(StrictModel):
    """Output tokens per second at concurrency 1 and a higher level must reach a floor.

    Warm-up requests first (not counted), then ``samples`` waves of ``concurrency`` requests
    at once per level, each ``max_new_tokens`` long with ``ignore_eos`` (so every request
    generates the same length), counted by the server's ``meta_info.completion_tokens``; a
    level's figure is the median of its samples. ``min_ratio`` is judged with ``tolerance``:
    after / before must reach ``min_ratio * (1 - tolerance)`` at every level. With ``baseline:
    before`` and no server to measure before, the gate fails unless ``min_tokens_per_s`` is set.
    """

    service: str = Field(description="A key of the playbook's 'services'.")
    min_tokens_per_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Floor for the median at concurrency 1 (one request's decode speed); also what "
            "decides when there is no baseline."
        ),
    )
    baseline: Literal["before"] | None = Field(
        default=None,
        description="'before': measure the old server too, before the run's first change.",
    )
    min_ratio: float = Field(
        default=1.0, gt=0, description="New / before must reach this at every concurrency."
    )
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        ge=0,
        lt=1,
        description=(
            "Measurement noise allowed, as a fraction of min_ratio: the gate needs "
            "min_ratio * (1 - tolerance) (default 0.03: x0.97 for min_ratio 1.0)."
        ),
    )
    concurrency: int = Field(
        default=4, ge=1, description="The higher level; concurrency 1 is always measured too."
    )
    samples: int = Field(default=3, ge=3, description="Samples per level (the median counts).")
    warmup: int = Field(
        default=2, ge=1, description="Requests sent first and not counted (at the higher level)."
    )
    max_new_tokens: int = Field(
        default=64, ge=1, description="Tokens generated per request (ignore_eos: always all)."
    )
    prompt: str = Field(default="Write a short story about a lighthouse keeper.")
    timeout: float = Field(default=600.0, gt=0, description="Seconds per request.")

    @field_validator("min_tokens_per_s", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``"{{ sglang_min_tokens_per_s }}"`` with the variable's default ``""``: no floor."""
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "requests" in data:
            raise ValueError(
                "requests is gone: the gate now takes 'samples' waves of 'concurrency' requests "
                "at each level (concurrency 1 and the higher one); remove requests"
            )
        return data

    @model_validator(mode="after")
    def _some_floor(self) -> GateThroughputArgs:
        if self.min_tokens_per_s is None and self.baseline is None:
            raise ValueError("give min_tokens_per_s, baseline: before, or both")
        return self

    def levels(self) -> list[int]:
        """The concurrencies measured: 1 and ``concurrency``."""
        return concurrency_levels(self.concurrency)

    def load(self) -> LoadSpec:
        """The load these arguments send, as `deploy.services.load` measures it."""
        from deploy.services.load import LoadSpec

        return LoadSpec(
            prompt=self.prompt,
            max_new_tokens=self.max_new_tokens,
            timeout=self.timeout,
            warmup=self.warmup,
            samples=self.samples,
            levels=tuple(self.levels()),
        )


@register
class GateThroughputStep(Step[GateThroughputArgs]):
    kind = "gate_throughput"
    example = """\
- name: At least 95% as fast as the server it replaced, and never under 50 tok/s
  gate_throughput:
    service: sglang
    baseline: before
    min_ratio: 0.95
    min_tokens_per_s: 50
"""

    def describe(self) -> str:
        return f"throughput gate on {self.args.service}"

    def before_first_change(self, ctx: StepContext) -> None:
        """With ``baseline: before``: measure the old server as it serves before the run
        changes anything (the figures, or why there are none, kept for `verify`)."""
        if self.args.baseline != "before":
            return
        from deploy.services.load import measure_baseline

        svc = control(ctx, self.args.service)
        levels, why = measure_baseline(svc, svc.current(), self.args.load(), ctx.note)
        facts = runtime(ctx, self.args.service)
        if levels is None:
            facts["baseline_note"] = why
        else:
            facts["baseline"] = [level.to_record() for level in levels]

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
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
        if planned.noop:
            return
        facts = runtime(ctx, args.service)
        from deploy.services.load import measure  # the service machinery, only when it runs

        ctx.note(f"measuring {args.service} throughput")
        after = measure(control(ctx, args.service), args.load(), ctx.note)
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
