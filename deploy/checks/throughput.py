"""The throughput gate's arithmetic: samples, medians, tolerance and the verdict. No I/O.

A gate that one noisy sample can fool, or that passes anything when it has nothing to compare
with, is worse than none: the run reports "faster" and the operator stops looking. The rules:

* a sample is the completion tokens the server reported (``meta_info.completion_tokens``) over
  the wall time of one wave of ``concurrency`` requests sent at once; a level's figure is the
  median of its samples (at least 5, so one outlier cannot decide);
* each level measured before the change is compared with the same level after it: the gate
  needs ``after / before >= min_ratio * (1 - tolerance)`` at concurrency 1, and
  ``min_ratio_loaded`` instead of ``min_ratio`` at every higher level (production load, where
  EAGLE-3 can lose what it wins alone). The tolerance absorbs the noise of a measurement
  through SSH (0.03 by default: 3 %), so ``min_ratio: 1.0`` means "not slower", not "faster in
  every sample"; a real regression (EAGLE-3 at 54.1 tok/s against 75 before, x0.72) fails
  whatever the tolerance is;
* the decision uses the samples' spread: the ratio of the medians is taken with an interval
  of ``Z`` standard errors, each median's estimated from its samples' median absolute
  deviation (1.2533 x 1.4826 x MAD / sqrt(n), relative to the median; the ratio's relative
  error is the root of the two squared). The level passes when the whole interval reaches the
  need, fails when the whole interval is below it, and is *undecided* otherwise: the gate
  then takes more samples of the new server (up to its ``max_samples``), and a level still
  undecided fails, saying so;
* ``min_tokens_per_s`` is a floor for the median at concurrency 1 (one request's decode speed,
  what a user of the server sees, and the figure speculative decoding changes most);
* with ``baseline: before`` but no figures from before (no server ran, or it was not healthy),
  the gate has nothing to compare with: it fails, unless ``min_tokens_per_s`` is set, which
  then decides alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Default measurement-noise allowance of ``min_ratio`` (a fraction of it).
DEFAULT_TOLERANCE = 0.03
#: Standard errors on each side of a ratio (about 95 % for a normal spread).
Z = 2.0


def rate(tokens: int, seconds: float) -> float:
    """Tokens per second of one sample; a sample that took no time or made no tokens is 0."""
    if tokens <= 0 or seconds <= 0:
        return 0.0
    return tokens / seconds


@dataclass(frozen=True)
class Level:
    """The samples (tokens/s) taken at one concurrency."""

    concurrency: int
    samples: tuple[float, ...]
    #: EAGLE-3's mean accepted tokens per verify step over the level's requests
    #: (``meta_info.spec_accept_length``); None when the server reports none.
    accept_length: float | None = None
    #: Each request's time to first token (s) and decode speed after it (tok/s), streamed.
    ttfts: tuple[float, ...] = ()
    decodes: tuple[float, ...] = ()

    @property
    def median(self) -> float:
        import statistics  # only a gate that measured needs it (~1 ms of every start-up else)

        return float(statistics.median(self.samples)) if self.samples else 0.0

    @property
    def spread(self) -> float:
        """The median's relative standard error, from the samples' median absolute deviation
        (0 with fewer than 2 samples or a median of 0)."""
        import math
        import statistics

        middle = self.median
        if len(self.samples) < 2 or middle <= 0:
            return 0.0
        mad = float(statistics.median(abs(s - middle) for s in self.samples))
        return 1.2533 * 1.4826 * mad / (middle * math.sqrt(len(self.samples)))

    def to_record(self) -> dict[str, Any]:
        """JSON-able, for the run's per-service facts."""
        return {
            "concurrency": self.concurrency,
            "samples": [round(s, 2) for s in self.samples],
            "accept_length": self.accept_length,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Level:
        accept = record.get("accept_length")
        return cls(
            int(record["concurrency"]),
            tuple(float(s) for s in record["samples"]),
            None if accept is None else float(accept),
        )


def levels_from_records(records: object) -> list[Level] | None:
    """Levels recorded by `Level.to_record`, or None when ``records`` holds none."""
    if not isinstance(records, list) or not records:
        return None
    try:
        return [Level.from_record(r) for r in records]
    except (KeyError, TypeError, ValueError):
        return None


def concurrency_levels(high: int | Iterable[int]) -> list[int]:
    """Concurrency 1 (where EAGLE-3 helps most) and the configured higher levels."""
    return sorted({1, *([high] if isinstance(high, int) else high)})


@dataclass
class Verdict:
    """The gate's decision, its one-line explanation per level, and the figures for reports."""

    problems: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    #: Levels whose interval straddles the need: more samples could decide them.
    undecided: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        return "; ".join(self.parts)


def _median(values: Iterable[float]) -> float:
    import statistics

    return float(statistics.median(values))


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def judge(
    after: Iterable[Level],
    before: Iterable[Level] | None,
    *,
    baseline: bool,
    min_ratio: float,
    tolerance: float = DEFAULT_TOLERANCE,
    min_tokens_per_s: float | None = None,
    no_baseline_reason: str = "not measured",
    min_ratio_loaded: float | None = None,
) -> Verdict:
    """Decide the gate from the levels measured after (and, if any, before) the change.

    Args:
        after: the new server's levels.
        before: the old server's, measured before the run's first change; None when there were none.
        baseline: whether the gate compares against before (``baseline: before``).
        min_ratio: after / before must reach ``min_ratio * (1 - tolerance)`` at concurrency 1
            (and at every level when ``min_ratio_loaded`` is None).
        min_ratio_loaded: the same for every level above 1 (production load).
        tolerance: the fraction of ``min_ratio`` allowed for measurement noise.
        min_tokens_per_s: floor for the median at concurrency 1 (None: no floor).
        no_baseline_reason: why ``before`` is None, for the message.

    The figures: per level ``tokens_per_s_c<N>`` (the median), ``before_tokens_per_s_c<N>`` and
    ``ratio_c<N>``, plus the same three without suffix for concurrency 1 (the headline).
    """
    verdict = Verdict()
    old = {level.concurrency: level for level in before or []}
    for level in sorted(after, key=lambda item: item.concurrency):
        c, now = level.concurrency, level.median
        wanted = min_ratio if c == 1 or min_ratio_loaded is None else min_ratio_loaded
        need = wanted * (1 - tolerance)
        keys = [f"_c{c}"] + ([""] if c == 1 else [])
        for suffix in keys:
            verdict.figures[f"tokens_per_s{suffix}"] = round(now, 1)
        part = f"concurrency {c}: {_fmt(now)} tok/s"
        if c == 1 and min_tokens_per_s is not None and now < min_tokens_per_s:
            verdict.problems.append(
                f"{_fmt(now)} tok/s at concurrency 1 is below the floor of {min_tokens_per_s:g}"
            )
        if baseline and c in old:
            was = old[c].median
            ratio = now / was if was > 0 else 0.0
            for suffix in keys:
                verdict.figures[f"before_tokens_per_s{suffix}"] = round(was, 1)
                verdict.figures[f"ratio{suffix}"] = round(ratio, 3)
            error = Z * ratio * (level.spread**2 + old[c].spread ** 2) ** 0.5
            band = f" ±{error:.2f}" if error >= 0.005 else ""
            part += f" vs {_fmt(was)} before (x{ratio:.2f}{band})"
            wording = (
                f"{_fmt(now)} tok/s at concurrency {c} is x{ratio:.2f} of the "
                f"{_fmt(was)} tok/s before the change{band and f' ({band.strip()})'} (need "
                f"x{wanted:g} within {tolerance:.0%}, x{need:.2f})"
            )
            if ratio + error < need:
                verdict.problems.append(wording)
            elif ratio - error < need:
                verdict.undecided.append(c)
                verdict.problems.append(
                    f"{wording}: undecided, the samples' spread ({len(level.samples)} after, "
                    f"{len(old[c].samples)} before) leaves x{ratio - error:.2f} to "
                    f"x{ratio + error:.2f}"
                )
        if level.decodes:
            decode = _median(level.decodes)
            verdict.figures[f"decode_tokens_per_s_c{c}"] = round(decode, 1)
            part += f", decode {_fmt(decode)} tok/s per request"
        if level.ttfts:
            ttft = _median(level.ttfts)
            verdict.figures[f"ttft_s_c{c}"] = round(ttft, 3)
            part += f", first token {ttft:.3f} s"
        if level.accept_length is not None:
            verdict.figures[f"accept_length_c{c}"] = round(level.accept_length, 2)
            part += f", acceptance length {level.accept_length:.2f}"
        verdict.parts.append(part)
    if baseline and not old:
        verdict.parts.append(f"no baseline: {no_baseline_reason}")
        if min_tokens_per_s is None:
            verdict.problems.append(
                f"no baseline to compare with ({no_baseline_reason}) and no min_tokens_per_s "
                "to judge by; set min_tokens_per_s for hosts with no server running before"
            )
    return verdict
