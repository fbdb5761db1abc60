"""How sure a ratio of two sets of samples is: Hodges–Lehmann with its Mann–Whitney interval.

The gate compares the new server's samples (tokens/s, one per wave) with the old one's. A
median of each and their quotient says nothing about how much the samples scatter: two
servers 3 % apart with 5 % noise look just as decided as two 30 % apart. So the gate asks
a distribution-free question instead, in logs (a ratio of speeds is a difference of logs):

* every pairwise difference ``log(after_i) - log(before_j)`` (``m * n`` of them);
* the estimate is their median, the Hodges–Lehmann estimator of the shift, as a ratio;
* the 95 % confidence interval is ``[D_(k), D_(mn+1-k)]`` of the sorted differences, with
  ``k`` from the exact null distribution of the Mann–Whitney ``U`` (`mann_whitney_cdf`): the
  interval of every shift the rank test would not reject. Rank-based, so one outlier moves it
  by one rank, not by its size (a Welch ``t`` on the same samples would let a single stalled
  wave widen it without bound).

With 3 samples a side no such interval exists at 95 % (``P(U = 0) = 1/20 > 2.5 %``); with
5 a side it is ``[D_(3), D_(23)]`` of 25 differences (exact coverage 96.8 %). Pure arithmetic,
no I/O; ``math`` only (no SciPy on an operator's workstation).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: Two-sided error of the interval: 95 % confidence.
ALPHA = 0.05

Decision = Literal["pass", "regressed", "undecided"]


@functools.cache
def _counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of two samples give ``U = u``, for every u.

    The recursion on the largest observation: it belongs to the first sample (each of the
    ``n`` others is below it: ``U`` grows by ``n``) or to the second (no change).
    """
    if m == 0 or n == 0:
        return (1,)
    first, second = _counts(m - 1, n), _counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, count in enumerate(first):
        out[u + n] += count
    for u, count in enumerate(second):
        out[u] += count
    return tuple(out)


def mann_whitney_cdf(m: int, n: int, u: int) -> float:
    """``P(U <= u)`` for samples of sizes ``m`` and ``n`` from one distribution (no ties)."""
    counts = _counts(m, n)
    return sum(counts[: max(0, u + 1)]) / math.comb(m + n, m)


def interval_rank(m: int, n: int, alpha: float = ALPHA) -> int:
    """``k``: the interval is the k-th smallest to the k-th largest pairwise difference.
    0 when the sizes are too small for any interval at this level."""
    if m == 0 or n == 0:
        return 0
    counts, total, below, k = _counts(m, n), math.comb(m + n, m), 0, 0
    for u, count in enumerate(counts):
        below += count
        if below / total > alpha / 2:
            break
        k = u + 1
    return k


@dataclass(frozen=True)
class RatioEstimate:
    """after / before: the estimate and its interval (0 and inf when there is none)."""

    ratio: float
    low: float
    high: float
    after_n: int
    before_n: int

    def decide(self, floor: float) -> Decision:
        """``pass`` when the whole interval reaches ``floor``, ``regressed`` when the whole of
        it is below, else ``undecided``: the spread does not tell."""
        if self.low >= floor:
            return "pass"
        if self.high < floor:
            return "regressed"
        return "undecided"


def ratio_interval(
    after: Sequence[float], before: Sequence[float], alpha: float = ALPHA
) -> RatioEstimate:
    """The Hodges–Lehmann ratio ``after / before`` and its ``1 - alpha`` interval.

    A sample of 0 tok/s (a wave that made nothing) counts as 1e-9, far below any real one.
    """
    logs_after = [math.log(max(x, 1e-9)) for x in after]
    logs_before = [math.log(max(x, 1e-9)) for x in before]
    diffs = sorted(a - b for a in logs_after for b in logs_before)
    if not diffs:
        return RatioEstimate(0.0, 0.0, math.inf, len(after), len(before))
    middle = len(diffs) // 2
    centre = diffs[middle] if len(diffs) % 2 else (diffs[middle - 1] + diffs[middle]) / 2
    k = interval_rank(len(after), len(before), alpha)
    if k == 0:
        return RatioEstimate(math.exp(centre), 0.0, math.inf, len(after), len(before))
    return RatioEstimate(
        math.exp(centre),
        math.exp(diffs[k - 1]),
        math.exp(diffs[len(diffs) - k]),
        len(after),
        len(before),
    )
