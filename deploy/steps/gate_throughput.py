"""``gate_throughput`` — the new server must be fast enough, absolutely and against before.

Output tokens per second at concurrency 1 and at the higher levels (`deploy.services.load`,
generated on the host: an uncounted warm-up, then at least 5 samples per level, ``ignore_eos``,
tokens from the server's ``meta_info.completion_tokens``), judged by
`deploy.checks.throughput`: medians and their spread, ``min_ratio`` (concurrency 1) and
``min_ratio_loaded`` (above it) within ``tolerance`` of the figures measured on the idle old
server before the run's first change (``baseline: before``: the engine's "before the first
change" phase), and ``min_tokens_per_s`` at concurrency 1.
This is the check that catches EAGLE-3 running at 54.1 tok/s where the server it replaced made
75. With no old server to measure, the gate fails unless ``min_tokens_per_s`` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from deploy.checks.throughput import (
    DEFAULT_TOLERANCE,
    Level,
    Verdict,
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
    """Output tokens per second at concurrency 1 and the higher levels must reach a floor.

    Warm-up requests first (not counted), then ``samples`` waves of N requests at once per
    level N, each ``max_new_tokens`` long with ``ignore_eos`` (so every request generates the
    same length) and its prompt taken in turn from ``prompts``, counted by the server's
    ``meta_info.completion_tokens``; a level's figure is the median of its samples, its
    acceptance length the mean of ``meta_info.spec_accept_length``. ``min_ratio`` (at
    concurrency 1) and ``min_ratio_loaded`` (above it) are judged with ``tolerance`` and the
    samples' spread: a level whose interval straddles the need gets more samples, up to
    ``max_samples``, and fails if still undecided. The baseline waits for the old server to be
    idle (its ``/get_load``), up to ``idle_wait`` seconds, else says it was measured under
    load. With ``baseline: before`` and no server to measure before, the gate fails unless
    ``min_tokens_per_s`` is set.
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
        default=1.0,
        gt=0,
        description="New / before must reach this at concurrency 1 (and at every level "
        "when min_ratio_loaded is not set).",
    )
    min_ratio_loaded: float | None = Field(
        default=None,
        gt=0,
        description="New / before must reach this at every level above 1 (production load); "
        "default: min_ratio.",
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
    concurrency: int | list[int] = Field(
        default=4,
        description="The higher level or levels (e.g. [32], or a text '1,32' from a "
        "variable); concurrency 1 is always measured too.",
    )
    samples: int = Field(default=5, ge=5, description="Samples per level (the median counts).")
    max_samples: int = Field(
        default=15,
        ge=5,
        description="The most samples a level gets when the spread leaves it undecided.",
    )
    idle_wait: float = Field(
        default=60.0,
        ge=0,
        description="Seconds the baseline waits for the old server to have no request in "
        "flight before it is measured anyway (and said to be under load).",
    )
    warmup: int = Field(
        default=2, ge=1, description="Requests sent first and not counted (at the higher level)."
    )
    max_new_tokens: int = Field(
        default=64, ge=1, description="Tokens generated per request (ignore_eos: always all)."
    )
    prompt: str = Field(
        default="Write a short story about a lighthouse keeper.",
        description="The first prompt (the requests take `prompts` in turn after it).",
    )
    prompts: list[str] = Field(
        default_factory=lambda: [
            "Explain how a lighthouse lens focuses light, step by step.",
            "List ten uses of a ship's logbook and say why each matters.",
            "Translate into French: the keeper climbed the stairs at dusk.",
        ],
        description="More prompts, so that a speculative draft model is not judged on one text.",
    )
    timeout: float = Field(default=600.0, gt=0, description="Seconds per request.")

    @field_validator("concurrency", mode="before")
    @classmethod
    def _levels_from_text(cls, value: Any) -> Any:
        """A template renders ``[1, 32]`` as text: accept "32", "1,32" and "[1, 32]" too."""
        if not isinstance(value, str) or "{{" in value:
            return value
        text = value.strip().strip("[]").strip()
        try:
            found = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            return value
        return found[0] if len(found) == 1 else found

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: int | list[int]) -> int | list[int]:
        levels = [value] if isinstance(value, int) else value
        if not isinstance(levels, list):  # a template kept as written: checked once rendered
            return value
        if not levels or any(isinstance(level, int) and level < 1 for level in levels):
            raise ValueError("concurrency levels must be at least 1")
        return value

    @field_validator("min_tokens_per_s", "min_ratio_loaded", mode="before")
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
        if self.max_samples < self.samples:
            raise ValueError("max_samples must be at least samples")
        return self

    def levels(self) -> list[int]:
        """The concurrencies measured: 1 and ``concurrency``'s levels."""
        return concurrency_levels(self.concurrency)

    def load(self) -> LoadSpec:
        """The load these arguments send, as `deploy.services.load` measures it."""
        from deploy.services.load import LoadSpec

        return LoadSpec(
            prompts=(self.prompt, *self.prompts),
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
        levels, why = measure_baseline(
            svc, svc.current(), self.args.load(), ctx.note, idle_wait=self.args.idle_wait
        )
        facts = runtime(ctx, self.args.service)
        if levels is None:
            facts["baseline_note"] = why
        else:
            facts["baseline"] = [level.to_record() for level in levels]
            if why:  # measured, but under load: said with the verdict
                facts["baseline_load"] = why

    @staticmethod
    def _count(levels: list[Level], concurrency: int) -> int:
        return next((len(lv.samples) for lv in levels if lv.concurrency == concurrency), 0)

    def _judge(
        self, after: list[Level], before: list[Level] | None, facts: dict[str, object]
    ) -> Verdict:
        args = self.args
        return judge(
            after,
            before,
            baseline=args.baseline == "before",
            min_ratio=args.min_ratio,
            min_ratio_loaded=args.min_ratio_loaded,
            tolerance=args.tolerance,
            min_tokens_per_s=args.min_tokens_per_s,
            no_baseline_reason=str(facts.get("baseline_note", "not measured")),
        )

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
        from deploy.services.load import measure, more_samples  # only when it runs

        ctx.note(f"measuring {args.service} throughput")
        svc = control(ctx, args.service)
        load = args.load()
        after = measure(svc, load, ctx.note)
        before = levels_from_records(facts.get("baseline"))
        verdict = self._judge(after, before, facts)
        while verdict.undecided:  # the spread leaves a level open: more samples, bounded
            room = {c for c in verdict.undecided if self._count(after, c) < args.max_samples}
            if not room:
                break
            extra = min(args.samples, args.max_samples - max(self._count(after, c) for c in room))
            after = more_samples(svc, load, after, room, extra, ctx.note)
            verdict = self._judge(after, before, facts)
        planned.figures.update(verdict.figures)
        planned.summary = verdict.summary
        if facts.get("baseline_load"):
            planned.summary += f"; baseline {facts['baseline_load']}"
        if not verdict.passed:
            raise CheckFailed(
                f"throughput gate failed for {args.service}: "
                + "; ".join(verdict.problems)
                + f" [{verdict.summary}]"
            )
