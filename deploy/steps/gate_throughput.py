"""``gate_throughput`` — the new server must be fast enough, absolutely and against before.

The load is generated on the host (`deploy.services.load`, `deploy.services.loadgen`): an
uncounted warm-up, then waves of streamed requests at each level of ``concurrency`` (kimi-eagle3:
1 and 32, production load), ``ignore_eos``, the prompts in turn, tokens from the server's
``meta_info.completion_tokens``. Per level it reports decode tok/s (after the first token), time
to first token, end-to-end tok/s and EAGLE-3's acceptance length. The verdict
(`deploy.checks.throughput`) is per level, on decode tok/s, with that level's ``min_ratio``
against the figures measured on the old server before the run's first change (``baseline:
before``, taken while it is idle): the Hodges–Lehmann ratio's 95 % interval must reach it;
a level the spread leaves undecided gets more samples, up to ``max_samples``, then fails.
This is the check that catches EAGLE-3 running at 54.1 tok/s where the server it replaced made
75, and an EAGLE-3 that wins at concurrency 1 and loses under production load. With no old
server to measure, the gate fails unless ``min_tokens_per_s`` is set.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from deploy.checks.throughput import DEFAULT_TOLERANCE, Verdict, concurrency_levels, judge
from deploy.config.inventory import StrictModel
from deploy.errors import CheckFailed
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service_client import control, runtime

if TYPE_CHECKING:
    from deploy.services.control import ServiceControl
    from deploy.services.load import LoadSpec, Measurement

#: Prompts of different lengths and subjects, sent in turn (one prompt would let a prefix
#: cache or one lucky draft sequence decide).
PROMPTS = (
    "Write a short story about a lighthouse keeper.",
    "Explain how a hash table handles collisions, with an example in Python.",
    "Summarise the causes of the French Revolution in five bullet points.",
    "Translate into German: The train to Munich leaves at half past eight from platform 4.",
    "List the steps to replace a bicycle's inner tube.",
    "What is the difference between TCP and UDP? Answer for a network engineer.",
)


def _values(value: Any) -> Any:
    """``"[1, 32]"``, ``"1,32"`` or ``"1 32"`` (a template renders a list var as text) as a
    list; anything else unchanged."""
    if isinstance(value, str) and not ("{{" in value or "{%" in value):  # rendered later
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError:
                return value
        return [item for item in text.replace(",", " ").split() if item]
    return value


class GateThroughputArgs(StrictModel):
    """Decode tokens per second at each concurrency must reach that level's floor.

    A warm-up first (not counted), then ``samples`` waves of ``concurrency`` streamed
    requests at once per level, generated on the host, each ``max_new_tokens`` long with
    ``ignore_eos``, counted by the server's ``meta_info.completion_tokens``. A level passes
    when the 95 % interval of new / before (Hodges–Lehmann on decode tok/s) reaches its
    ``min_ratio * (1 - tolerance)``, fails when the interval is below it, and otherwise takes
    more samples up to ``max_samples``, then fails as undecided. With ``baseline: before`` and
    no server to measure before, the gate fails unless ``min_tokens_per_s`` is set.
    """

    service: str = Field(description="A key of the playbook's 'services'.")
    min_tokens_per_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Floor for the median decode tok/s at the lowest level (one request's speed at "
            "concurrency 1); also what decides when there is no baseline."
        ),
    )
    baseline: Literal["before"] | None = Field(
        default=None,
        description="'before': measure the old server too, before the run's first change.",
    )
    concurrency: list[int] | int | str = Field(
        default=[1, 4],
        min_length=1,
        description=(
            "The levels measured, e.g. [1, 32] (production load); one number N means [1, N]. "
            "Text such as '1,32' is read as a list (for -e)."
        ),
    )
    min_ratio: list[float] | float | str = Field(
        default=[1.0],
        min_length=1,
        description=(
            "New / before must reach this at each level: one value for every level, or one per "
            "level of concurrency, in order (e.g. [1.0, 0.9]: not slower at 1, at most 10 % "
            "slower at 32)."
        ),
    )
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        ge=0,
        lt=1,
        description=(
            "Measurement noise allowed, as a fraction of min_ratio: the interval must reach "
            "min_ratio * (1 - tolerance) (default 0.03: x0.97 for min_ratio 1.0)."
        ),
    )
    samples: int = Field(
        default=5, ge=5, description="Waves per level first (each wave is one sample)."
    )
    baseline_samples: int = Field(
        default=10,
        ge=5,
        le=30,
        description="Waves per level on the old server (it cannot be measured again once "
        "replaced, and its spread bounds the interval's width).",
    )
    max_samples: int = Field(
        default=15,
        ge=5,
        le=30,
        description="The most waves per level on the new server while the spread leaves it "
        "undecided; still undecided then, the gate fails.",
    )
    warmup: int | None = Field(
        default=None,
        ge=1,
        description="Requests sent first and not counted (default: one wave of the highest level).",
    )
    max_new_tokens: int = Field(
        default=64, ge=2, description="Tokens generated per request (ignore_eos: always all)."
    )
    prompts: list[str] = Field(
        default=list(PROMPTS), min_length=1, description="Sent in turn, one per request."
    )
    timeout: float = Field(default=600.0, gt=0, description="Seconds per request.")
    idle_wait: float = Field(
        default=60.0,
        ge=0,
        description=(
            "Seconds, over one measurement, to wait for other clients' requests to finish "
            "before a wave (the server's /v1/loads or /metrics); then it measures anyway and "
            "says the baseline was measured under load. 0: do not check."
        ),
    )

    @field_validator("min_tokens_per_s", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``"{{ sglang_min_tokens_per_s }}"`` with the variable's default ``""``: no floor."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("concurrency", mode="before")
    @classmethod
    def _levels(cls, value: Any) -> Any:
        value = _values(value)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, int | str) and not isinstance(value, bool):  # N: [1, N]
            return concurrency_levels(int(value)) if str(value).strip().isdigit() else value
        return value

    @field_validator("min_ratio", mode="before")
    @classmethod
    def _ratios(cls, value: Any) -> Any:
        value = _values(value)
        return [value] if isinstance(value, int | float) else value

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "requests" in data:
            raise ValueError(
                "requests is gone: the gate now takes 'samples' waves of 'concurrency' requests "
                "at each level (concurrency 1 and the higher one); remove requests"
            )
        if isinstance(data, dict) and "prompt" in data:
            raise ValueError("prompt is gone: give prompts, a list sent in turn")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> GateThroughputArgs:
        if self.min_tokens_per_s is None and self.baseline is None:
            raise ValueError("give min_tokens_per_s, baseline: before, or both")
        if self.max_samples < self.samples:
            raise ValueError(f"max_samples {self.max_samples} is below samples {self.samples}")
        levels, ratios = self.concurrency, self.min_ratio
        for name, value in (("concurrency", levels), ("min_ratio", ratios)):
            if isinstance(value, str) and not ("{{" in value or "{%" in value):
                raise ValueError(f"{name}: {value!r} is not a list of numbers")
        if not isinstance(levels, list) or not isinstance(ratios, list):
            return self  # as written (a template): judged once rendered
        if any(c < 1 for c in levels) or len(set(levels)) != len(levels):
            raise ValueError(f"concurrency: distinct levels of 1 or more, not {levels}")
        if len(ratios) not in (1, len(levels)):
            raise ValueError(
                f"min_ratio has {len(ratios)} values for {len(levels)} levels of concurrency "
                f"{levels}: give one, or one per level"
            )
        if any(r <= 0 for r in ratios):
            raise ValueError(f"min_ratio must be above 0, not {ratios}")
        return self

    def levels(self) -> list[int]:
        """The concurrencies measured, in the order given."""
        assert isinstance(self.concurrency, list), "validated: a list once rendered"
        return list(self.concurrency)

    def ratios(self) -> dict[int, float]:
        """Each level's minimum ratio."""
        assert isinstance(self.min_ratio, list), "validated: a list once rendered"
        if len(self.min_ratio) == 1:
            return {c: self.min_ratio[0] for c in self.levels()}
        return dict(zip(self.levels(), self.min_ratio, strict=True))

    def load(self) -> LoadSpec:
        """The load these arguments send, as `deploy.services.load` measures it."""
        from deploy.services.load import LoadSpec

        return LoadSpec(
            prompts=tuple(self.prompts),
            max_new_tokens=self.max_new_tokens,
            timeout=self.timeout,
            warmup=self.warmup or max(self.levels()),
            samples=self.samples,
            levels=tuple(self.levels()),
            max_samples=self.max_samples,
            baseline_samples=self.baseline_samples,
            idle_wait=self.idle_wait,
        )


def load_note(measured: Measurement | None, when: str, idle_wait: float) -> str:
    """What ran beside a measurement: '' when the server was idle (or not asked)."""
    if measured is None or idle_wait <= 0:
        return ""
    if measured.busy_source is None:
        return f"{when}: the server could not say whether it was idle (no /v1/loads, /metrics)"
    if measured.busy_waves:
        waves = sum(len(level.samples) for level in measured.levels)
        return (
            f"{when} measured under load: up to {measured.busy_max} other requests running in "
            f"{measured.busy_waves} of {waves} waves (waited {measured.idle_waited:.0f} s of "
            f"{idle_wait:g} for idle)"
        )
    return ""


@register
class GateThroughputStep(Step[GateThroughputArgs]):
    kind = "gate_throughput"
    example = """\
- name: Not slower at 1, at most 10 % slower at 32 at once, and never under 50 tok/s
  gate_throughput:
    service: sglang
    baseline: before
    concurrency: [1, 32]
    min_ratio: [1.0, 0.9]
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
        measured, why = measure_baseline(svc, svc.current(), self.args.load(), ctx.note)
        facts = runtime(ctx, self.args.service)
        if measured is None:
            facts["baseline_note"] = why
        else:
            facts["baseline"] = measured.to_record()

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
                f"{args.load().warmup} warm-up requests, then {args.samples} samples (up to "
                f"{args.max_samples}; {args.baseline_samples} before the change) at "
                f"concurrency {levels}, {args.max_new_tokens} tokens each, streamed from the host"
            )
        )

    def _judge(
        self, after: Measurement, before: Measurement | None, why: str, final: bool
    ) -> Verdict:
        args = self.args
        return judge(
            after.levels,
            before.levels if before else None,
            baseline=args.baseline == "before",
            min_ratio=args.ratios(),
            tolerance=args.tolerance,
            min_tokens_per_s=args.min_tokens_per_s,
            no_baseline_reason=why,
            final=final,
        )

    def _decide(
        self, svc: ServiceControl, ctx: StepContext, before: Measurement | None, why: str
    ) -> tuple[Measurement, Verdict]:
        """Measure, then more samples where the spread leaves a level undecided."""
        from deploy.services.load import measure, measure_more

        load = self.args.load()
        after = measure(svc, load, ctx.note)
        verdict = self._judge(after, before, why, final=False)
        while True:
            taken = {level.concurrency: len(level.samples) for level in after.levels}
            plan = [
                (c, min(load.samples, load.max_samples - taken[c]))
                for c in verdict.undecided
                if taken[c] < load.max_samples
            ]
            if not plan:
                return after, self._judge(after, before, why, final=True)
            after = after.merged(measure_more(svc, load, plan, ctx.note))
            verdict = self._judge(after, before, why, final=False)

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        if planned.noop:
            return
        facts = runtime(ctx, args.service)
        from deploy.services.load import Measurement

        before = Measurement.from_record(facts.get("baseline"))
        ctx.note(f"measuring {args.service} throughput")
        why = str(facts.get("baseline_note", "not measured"))
        after, verdict = self._decide(control(ctx, args.service), ctx, before, why)
        figures: dict[str, Any] = dict(verdict.figures)
        for prefix, measured in (("", after), ("before_", before)):
            if measured is None:
                continue
            if measured.accept_length is not None:
                figures[f"{prefix}avg_spec_accept_length"] = round(measured.accept_length, 2)
            if measured.busy_max is not None:
                figures[f"{prefix}busy_requests"] = measured.busy_max
        planned.figures.update(figures)
        notes = [
            load_note(before, "baseline", args.idle_wait),
            load_note(after, "new server", args.idle_wait),
        ]
        planned.summary = "; ".join([verdict.summary, *filter(None, notes)])
        if not verdict.passed:
            where = (
                f" (regressed at concurrency {', '.join(map(str, verdict.regressed))})"
                if verdict.regressed
                else ""
            )
            raise CheckFailed(
                f"throughput gate failed for {args.service}{where}: "
                + "; ".join(verdict.problems)
                + f" [{planned.summary}]"
            )
