"""The throughput gate's arithmetic: waves into figures, levels, the verdict. No I/O.

A gate that one noisy sample can fool, or that passes anything when it has nothing to compare
with, is worse than none: the run reports "faster" and the operator stops looking. The rules:

* a sample is one wave of ``concurrency`` streamed requests sent at once, generated on the
  host (`deploy.services.loadgen`). Its figures (`wave_figures`): **decode tok/s**, each
  request's tokens after its first over the time after its first token, summed over the wave
  (at concurrency 1 the speed one user sees; under load the server's decode throughput);
  **time to first token** (the wave's median); **end-to-end tok/s** (the wave's completion
  tokens over its wall time); EAGLE-3's **acceptance length** (the mean of the requests'
  ``meta_info.spec_accept_length``). Tokens are the server's ``meta_info.completion_tokens``;
* each level measured before the restart is compared with the same level after it, on decode
  tok/s, by the Hodges–Lehmann ratio and its 95 % Mann–Whitney interval (`deploy.checks.spread`).
  The level's ``min_ratio`` is met within ``tolerance`` (3 % by default: ``min_ratio: 1.0``
  means "not slower", which a server exactly as fast must be able to show) when the whole
  interval reaches ``min_ratio * (1 - tolerance)``; it regressed when the whole interval is
  below; otherwise the spread leaves it undecided: more samples are taken, and a level still
  undecided after the most samples fails, saying so;
* ``min_tokens_per_s`` is a floor for the median decode tok/s at the lowest level (one
  request's decode speed at concurrency 1, the figure speculative decoding changes most);
* with ``baseline: before`` but no figures from before (no server ran, or it was not healthy),
  the gate has nothing to compare with: it fails, unless ``min_tokens_per_s`` is set, which
  then decides alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy.checks.spread import Decision, ratio_interval

#: Default measurement-noise allowance of ``min_ratio`` (a fraction of it).
DEFAULT_TOLERANCE = 0.03


def rate(tokens: int, seconds: float) -> float:
    """Tokens per second; a span that took no time or made no tokens is 0."""
    if tokens <= 0 or seconds <= 0:
        return 0.0
    return tokens / seconds


def _median(values: Sequence[float]) -> float:
    import statistics  # only a gate that measured needs it (~1 ms of every start-up else)

    return float(statistics.median(values)) if values else 0.0


@dataclass(frozen=True)
class WaveFigures:
    """One wave's figures (see the module's docstring); ``accept`` None without EAGLE."""

    decode: float
    ttft: float
    e2e: float
    accept: float | None


def wave_figures(wave: Mapping[str, Any]) -> WaveFigures:
    """A wave as the generator reports it — ``wall`` seconds and ``requests``, each
    ``[ttft_s, decode_s, completion_tokens, spec_accept_length or None, tokens in the first
    event]`` — as figures.

    Decode counts the tokens after the first event over the time after it; a request with
    none, or no time, after its first event adds no decode speed (the server sent
    everything in one chunk).
    """
    requests = [list(r) + [1] * (5 - len(r)) for r in wave.get("requests") or []]
    decode = sum(rate(int(r[2]) - int(r[4]), float(r[1])) for r in requests)
    accepts = [float(r[3]) for r in requests if r[3] is not None]
    return WaveFigures(
        decode=decode,
        ttft=_median([float(r[0]) for r in requests]),
        e2e=rate(sum(int(r[2]) for r in requests), float(wave.get("wall") or 0.0)),
        accept=sum(accepts) / len(accepts) if accepts else None,
    )


@dataclass(frozen=True)
class Level:
    """The samples taken at one concurrency: decode tok/s per wave (what the gate decides
    on), and per wave the time to first token, end-to-end tok/s and acceptance length."""

    concurrency: int
    samples: tuple[float, ...]
    ttft: tuple[float, ...] = ()
    e2e: tuple[float, ...] = ()
    accept: tuple[float, ...] = ()

    @property
    def median(self) -> float:
        return _median(self.samples)

    @classmethod
    def from_waves(cls, concurrency: int, waves: Iterable[Mapping[str, Any]]) -> Level:
        figures = [wave_figures(w) for w in waves]
        return cls(
            concurrency,
            tuple(f.decode for f in figures),
            tuple(f.ttft for f in figures),
            tuple(f.e2e for f in figures),
            tuple(f.accept for f in figures if f.accept is not None),
        )

    def joined(self, more: Level) -> Level:
        """This level with ``more``'s samples after its own (more waves at the same level)."""
        return Level(
            self.concurrency,
            self.samples + more.samples,
            self.ttft + more.ttft,
            self.e2e + more.e2e,
            self.accept + more.accept,
        )

    def to_record(self) -> dict[str, Any]:
        """JSON-able, for the run's per-service facts."""
        return {
            "concurrency": self.concurrency,
            "samples": [round(s, 2) for s in self.samples],
            "ttft": [round(s, 4) for s in self.ttft],
            "e2e": [round(s, 2) for s in self.e2e],
            "accept": [round(s, 3) for s in self.accept],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Level:
        def floats(key: str) -> tuple[float, ...]:
            return tuple(float(s) for s in record.get(key) or ())

        return cls(
            int(record["concurrency"]),
            tuple(float(s) for s in record["samples"]),
            floats("ttft"),
            floats("e2e"),
            floats("accept"),
        )

    def figures(self, prefix: str = "") -> dict[str, float]:
        """``tokens_per_s_cN`` and the rest for this level (``prefix``: ``before_``)."""
        c = self.concurrency
        out = {
            f"{prefix}tokens_per_s_c{c}": round(self.median, 1),
            f"{prefix}samples_c{c}": len(self.samples),
        }
        if self.ttft:
            out[f"{prefix}ttft_s_c{c}"] = round(_median(self.ttft), 4)
        if self.e2e:
            out[f"{prefix}e2e_tokens_per_s_c{c}"] = round(_median(self.e2e), 1)
        if self.accept:
            out[f"{prefix}accept_length_c{c}"] = round(sum(self.accept) / len(self.accept), 2)
        return out


def levels_from_records(records: object) -> list[Level] | None:
    """Levels recorded by `Level.to_record`, or None when ``records`` holds none."""
    if not isinstance(records, list) or not records:
        return None
    try:
        return [Level.from_record(r) for r in records]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def concurrency_levels(high: int) -> list[int]:
    """Concurrency 1 (where EAGLE-3 helps most) and the configured higher level."""
    return sorted({1, high})


@dataclass
class Verdict:
    """The gate's decision, its one-line explanation per level, and the figures for reports.

    ``undecided``: the levels whose interval straddles their floor (more samples may decide
    them; `judge` with ``final`` turns them into problems)."""

    problems: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    undecided: list[int] = field(default_factory=list)
    #: The levels that regressed (what a failure names first).
    regressed: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        return "; ".join(self.parts)


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _ratio_text(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def ratio_for(min_ratio: float | Mapping[int, float], concurrency: int) -> float:
    """The level's minimum ratio: one number for every level, or one per concurrency."""
    if isinstance(min_ratio, Mapping):
        return float(min_ratio[concurrency])
    return float(min_ratio)


def judge(
    after: Iterable[Level],
    before: Iterable[Level] | None,
    *,
    baseline: bool,
    min_ratio: float | Mapping[int, float],
    tolerance: float = DEFAULT_TOLERANCE,
    min_tokens_per_s: float | None = None,
    no_baseline_reason: str = "not measured",
    final: bool = True,
) -> Verdict:
    """Decide the gate from the levels measured after (and, if any, before) the change.

    Args:
        after: the new server's levels.
        before: the old server's, measured before the run's first change; None when there were none.
        baseline: whether the gate compares against before (``baseline: before``).
        min_ratio: per level (or for all), after / before must reach ``min_ratio * (1 -
            tolerance)`` with the whole 95 % interval of the ratio.
        tolerance: the fraction of ``min_ratio`` allowed for measurement noise.
        min_tokens_per_s: floor for the median decode tok/s at the lowest level (None: none).
        no_baseline_reason: why ``before`` is None, for the message.
        final: whether more samples can still come; when True an undecided level fails.

    The figures: per level N those of `Level.figures` (and with ``before_``), ``ratio_cN``
    (the estimate), ``ratio_low_cN`` and ``ratio_high_cN`` (its interval) and
    ``min_ratio_cN``; ``tokens_per_s``, ``before_tokens_per_s`` and ``ratio`` repeat the
    lowest level's (the headline).
    """
    verdict = Verdict()
    old = {level.concurrency: level for level in before or []}
    ordered = sorted(after, key=lambda item: item.concurrency)
    lowest = ordered[0].concurrency if ordered else 1
    for level in ordered:
        c, now = level.concurrency, level.median
        verdict.figures.update(level.figures())
        part = f"concurrency {c}: {_fmt(now)} tok/s"
        if c == lowest:
            verdict.figures["tokens_per_s"] = round(now, 1)
            if min_tokens_per_s is not None and now < min_tokens_per_s:
                verdict.problems.append(
                    f"{_fmt(now)} tok/s at concurrency {c} is below the floor of "
                    f"{min_tokens_per_s:g}"
                )
        if baseline and c in old:
            was, want = old[c], ratio_for(min_ratio, c)
            need = want * (1 - tolerance)
            estimate = ratio_interval(level.samples, was.samples)
            verdict.figures.update(was.figures("before_"))
            verdict.figures[f"ratio_c{c}"] = round(estimate.ratio, 3)
            verdict.figures[f"ratio_low_c{c}"] = round(estimate.low, 3)
            if not math.isinf(estimate.high):  # no interval: JSON has no infinity
                verdict.figures[f"ratio_high_c{c}"] = round(estimate.high, 3)
            verdict.figures[f"min_ratio_c{c}"] = want
            if c == lowest:
                verdict.figures["before_tokens_per_s"] = round(was.median, 1)
                verdict.figures["ratio"] = round(estimate.ratio, 3)
            spread = f"95 % interval x{_ratio_text(estimate.low)}-x{_ratio_text(estimate.high)}"
            part += f" vs {_fmt(was.median)} before (x{estimate.ratio:.2f}, {spread})"
            decision: Decision = estimate.decide(need)
            wanted = f"need x{want:g} within {tolerance:.0%}, x{need:.2f}"
            if decision == "regressed":
                verdict.regressed.append(c)
                verdict.problems.append(
                    f"{_fmt(now)} tok/s at concurrency {c} is x{estimate.ratio:.2f} of the "
                    f"{_fmt(was.median)} tok/s before the change ({spread}; {wanted})"
                )
            elif decision == "undecided":
                verdict.undecided.append(c)
                if final:
                    verdict.problems.append(
                        f"undecided at concurrency {c} after {len(level.samples)} samples "
                        f"(against {len(was.samples)} before): x{estimate.ratio:.2f}, {spread} "
                        f"reaches both sides of x{need:.2f} ({wanted}); the gate fails what "
                        "the spread leaves undecided"
                    )
        verdict.parts.append(part)
    if baseline and not old:
        verdict.parts.append(f"no baseline: {no_baseline_reason}")
        if min_tokens_per_s is None:
            verdict.problems.append(
                f"no baseline to compare with ({no_baseline_reason}) and no min_tokens_per_s "
                "to judge by; set min_tokens_per_s for hosts with no server running before"
            )
    return verdict
