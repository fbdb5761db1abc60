"""deploy.checks.throughput and .spread: the gate's figures, its interval, its verdict.

Table-driven on exact samples, then on noisy synthetic ones (seeded): the decision rule must
pass a server as fast as before through noise, fail a real regression through noise, and
fail — saying so — what the spread cannot decide.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from deploy.checks.spread import interval_rank, mann_whitney_cdf, ratio_interval
from deploy.checks.throughput import (
    Level,
    concurrency_levels,
    judge,
    levels_from_records,
    rate,
    wave_figures,
)
from deploy.steps.gate_throughput import GateThroughputArgs


def levels(**samples: tuple[float, ...]) -> list[Level]:
    """``levels(c1=(a, b, ...), c32=(...))``: decode tok/s per wave."""
    return [Level(int(key[1:]), values) for key, values in samples.items()]


def five(value: float) -> tuple[float, ...]:
    return (value,) * 5


def test_rate_and_median() -> None:
    assert rate(64, 0.5) == 128.0
    assert rate(0, 1.0) == 0.0 and rate(10, 0.0) == 0.0
    assert Level(1, (75.0, 10.0, 74.0)).median == 74.0
    assert Level(1, ()).median == 0.0


def test_a_wave_gives_decode_ttft_e2e_and_acceptance() -> None:
    """Decode counts the tokens after the first event over the time after it, summed over
    the wave's requests; TTFT is the wave's median; e2e is all tokens over the wall time."""
    wave = {
        "wall": 1.1,
        "requests": [
            [0.10, 0.63, 64, 2.5, 1],  # 63 tokens in 0.63 s after the first: 100 tok/s
            [0.05, 0.60, 64, 3.5, 4],  # 60 after a first event of 4: 100 tok/s
            [0.20, 0.0, 64, None, 64],  # all in one event: no decode speed
        ],
    }
    figures = wave_figures(wave)
    assert figures.decode == pytest.approx(200.0)
    assert figures.ttft == 0.10
    assert figures.e2e == pytest.approx(192 / 1.1)
    assert figures.accept == 3.0
    plain = wave_figures({"wall": 1.0, "requests": [[0.1, 0.5, 51, None]]})  # 4 fields: first 1
    assert plain.decode == pytest.approx(100.0) and plain.accept is None


def test_records_round_trip_and_garbage_is_no_baseline() -> None:
    measured = [Level(1, (75.04, 74.9), (0.05, 0.06), (70.0, 71.0), (2.5, 2.6)), Level(4, (300.0,))]
    assert levels_from_records([level.to_record() for level in measured]) == measured
    for garbage in (None, [], 75.0, [{"concurrency": 1}], "x"):
        assert levels_from_records(garbage) is None


def test_mann_whitney_distribution_and_interval_ranks() -> None:
    """Against the exact tables: 5 + 5 samples, P(U <= 2) = 4/252; the 95 % interval is the
    3rd smallest to the 3rd largest of 25 differences (k=3); 10 + 5: k=9; 3 + 3 gives none."""
    assert mann_whitney_cdf(5, 5, 2) == pytest.approx(4 / 252)
    assert mann_whitney_cdf(5, 5, 25) == pytest.approx(1.0)
    assert mann_whitney_cdf(3, 4, -1) == 0.0
    assert [interval_rank(m, n) for m, n in ((3, 3), (4, 4), (5, 5), (10, 5), (15, 15))] == [
        0,
        1,
        3,
        9,
        65,
    ]


def test_the_interval_of_a_ratio() -> None:
    exact = ratio_interval(five(96.1), five(75.0))
    assert exact.ratio == pytest.approx(96.1 / 75.0) and exact.low == exact.high == exact.ratio
    spread = ratio_interval((1.0, 2.0, 3.0, 4.0, 5.0), five(1.0))
    assert (spread.low, spread.ratio, spread.high) == pytest.approx((1.0, 3.0, 5.0))
    none = ratio_interval((1.0, 2.0, 3.0), (1.0, 2.0, 3.0))
    assert none.low == 0.0 and math.isinf(none.high) and none.decide(0.97) == "undecided"


BEFORE = levels(c1=(75.0, 74.0, 76.0, 75.5, 74.5), c32=(2400.0, 2380.0, 2420.0, 2410.0, 2390.0))
RATIOS = {1: 1.0, 32: 0.9}

# (id, after, before, keyword arguments, passes, words in the problems)
CASES: list[tuple[str, list[Level], list[Level] | None, dict[str, Any], bool, list[str]]] = [
    (
        "the motivating regression: EAGLE-3 at 54.1 against 75",
        levels(c1=(54.1, 54.0, 54.2, 54.1, 54.3), c32=(1731.0, 1730.0, 1735.0, 1729.0, 1733.0)),
        BEFORE,
        {},
        False,
        ["54.1 tok/s at concurrency 1 is x0.72 of the 75.0", "concurrency 32 is x0.72"],
    ),
    (
        "EAGLE-3 working: 96.1 against 75",
        levels(c1=(96.1, 96.0, 96.3, 96.2, 95.9), c32=(3075.0, 3070.0, 3080.0, 3072.0, 3079.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "wins at one request, loses under production load: fails naming concurrency 32",
        levels(c1=(96.1, 96.0, 96.3, 96.2, 95.9), c32=(1300.0, 1310.0, 1290.0, 1305.0, 1295.0)),
        BEFORE,
        {},
        False,
        ["at concurrency 32 is x0.54", "need x0.9 within 3%, x0.87"],
    ),
    (
        "8 % slower under load is within production load's 10 %",
        levels(c1=five(75.0), c32=five(2208.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "within the tolerance: x0.98 passes min_ratio 1.0",
        levels(c1=five(73.5), c32=five(2400.0)),
        levels(c1=five(75.0), c32=five(2400.0)),
        {},
        True,
        [],
    ),
    (
        "just outside the tolerance: x0.96 fails min_ratio 1.0",
        levels(c1=five(72.0), c32=five(2400.0)),
        levels(c1=five(75.0), c32=five(2400.0)),
        {},
        False,
        ["x0.96", "need x1 within 3%, x0.97"],
    ),
    (
        "no tolerance: x0.99 fails",
        levels(c1=five(74.25)),
        levels(c1=five(75.0)),
        {"tolerance": 0.0},
        False,
        ["x0.99"],
    ),
    (
        "one bad wave of five leaves it undecided, and undecided fails",
        levels(c1=(20.0, 96.0, 97.0, 96.5, 96.2)),
        BEFORE,
        {},
        False,
        ["undecided at concurrency 1 after 5 samples (against 5 before)", "gate fails what"],
    ),
    (
        "the same bad wave among ten is outvoted",
        levels(c1=(20.0, 96.0, 97.0, 96.5, 96.2, 96.4, 96.1, 95.8, 96.3, 96.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "one lucky wave among ten cannot pass it",
        levels(c1=(54.0, 500.0, 54.2, 54.1, 53.9, 54.3, 54.0, 54.2, 54.1, 54.0)),
        BEFORE,
        {},
        False,
        ["x0.72"],
    ),
    (
        "no baseline and no floor: fails",
        levels(c1=five(96.1), c32=five(3000.0)),
        None,
        {"no_baseline_reason": "old server was not running"},
        False,
        ["no baseline to compare with (old server was not running)", "set min_tokens_per_s"],
    ),
    (
        "no baseline, floor met: passes",
        levels(c1=five(96.1), c32=five(3000.0)),
        None,
        {"min_tokens_per_s": 80},
        True,
        [],
    ),
    (
        "no baseline, under the floor: fails",
        levels(c1=five(54.1), c32=five(3000.0)),
        None,
        {"min_tokens_per_s": 80},
        False,
        ["54.1 tok/s at concurrency 1 is below the floor of 80"],
    ),
    (
        "floor only (no baseline wanted), met",
        levels(c1=five(96.1)),
        None,
        {"baseline": False, "min_tokens_per_s": 90},
        True,
        [],
    ),
    (
        "min_ratio 1.2 asks for a real speed-up",
        levels(c1=five(80.0)),
        levels(c1=five(75.0)),
        {"min_ratio": 1.2},
        False,
        ["x1.07", "need x1.2 within 3%, x1.16"],
    ),
]


@pytest.mark.parametrize(
    ("after", "before", "kwargs", "passes", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_judge(
    after: list[Level],
    before: list[Level] | None,
    kwargs: dict[str, Any],
    passes: bool,
    words: list[str],
) -> None:
    options: dict[str, Any] = {"baseline": True, "min_ratio": RATIOS, **kwargs}
    verdict = judge(after, before, **options)
    assert verdict.passed is passes, verdict.problems
    problems = "; ".join(verdict.problems)
    for word in words:
        assert word in problems


def test_undecided_is_not_a_problem_while_samples_can_still_come() -> None:
    after = levels(c1=(20.0, 96.0, 97.0, 96.5, 96.2))
    verdict = judge(after, BEFORE, baseline=True, min_ratio=1.0, final=False)
    assert verdict.passed and verdict.undecided == [1] and verdict.regressed == []
    failed = judge(after, BEFORE, baseline=True, min_ratio=1.0)
    assert not failed.passed and failed.undecided == [1]


def noisy(rng: random.Random, mean: float, spread: float, count: int) -> tuple[float, ...]:
    """``count`` samples around ``mean`` with relative noise ``spread`` (normal, and one wave
    in twenty stalled to half speed: what a busy host does to a measurement)."""
    return tuple(
        mean * (0.5 if rng.random() < 0.05 else 1.0) * (1 + rng.gauss(0, spread))
        for _ in range(count)
    )


def decided(rng: random.Random, after: float, before: float, spread: float, floor: float) -> str:
    """The gate's sequence on one level: 10 samples before; after, 5 samples, then 5 more
    while undecided, up to 15."""
    old = noisy(rng, before, spread, 10)
    new = noisy(rng, after, spread, 5)
    while True:
        decision = ratio_interval(new, old).decide(floor)
        if decision != "undecided" or len(new) >= 15:
            return decision
        new += noisy(rng, after, spread, 5)


@pytest.mark.parametrize(
    ("after", "spread", "expected", "at_least"),
    [
        (75.0, 0.01, "pass", 0.99),  # as fast, 1 % noise: passes (the noise allowance is 3 %)
        (75.0, 0.02, "pass", 0.80),  # 2 % noise against a 3 % allowance: mostly decided
        (96.1, 0.05, "pass", 0.99),  # EAGLE-3 working, 5 % noise
        (54.1, 0.05, "regressed", 0.98),  # the motivating regression, 5 % noise
        (54.1, 0.20, "regressed", 0.80),  # ... through 20 % noise (the rest: undecided)
        (72.75, 0.01, "undecided", 0.85),  # exactly at the floor (x0.97): the spread cannot tell
    ],
    ids=[
        "as fast",
        "as fast, noisier",
        "EAGLE-3 faster",
        "regression",
        "regression, very noisy",
        "at the floor",
    ],
)
def test_the_decision_rule_on_noisy_samples(
    after: float, spread: float, expected: str, at_least: float
) -> None:
    """Seeded noise, 200 trials each: the rule says what the truth is, nearly always, and
    never the opposite (a regression never passes, a faster server never regresses). The
    gate fails both "regressed" and "undecided": only "pass" passes."""
    rng = random.Random(31)
    trials = 200
    outcomes = [decided(rng, after, 75.0, spread, floor=0.97) for _ in range(trials)]
    counts = {k: outcomes.count(k) for k in ("pass", "regressed", "undecided")}
    assert counts[expected] >= at_least * trials, counts
    if expected == "pass":
        assert counts["regressed"] == 0, counts
    if expected == "regressed":
        assert counts["pass"] == 0, counts
    if expected == "undecided":  # on the line: either verdict is a coin, and rare
        assert counts["pass"] <= 0.05 * trials, counts


def test_a_noise_the_samples_cannot_see_through_is_undecided_and_fails() -> None:
    """Two servers within 3 % of each other under 30 % noise: 15 samples cannot tell, and
    the gate fails saying it is undecided (rather than passing a coin flip)."""
    rng = random.Random(7)
    old = noisy(rng, 75.0, 0.3, 5)
    new = noisy(rng, 74.0, 0.3, 15)
    verdict = judge(levels(c1=new), [Level(1, old)], baseline=True, min_ratio=1.0)
    assert not verdict.passed and verdict.undecided == [1]
    assert "undecided at concurrency 1 after 15 samples" in verdict.problems[0]


def test_figures_and_summary_per_concurrency() -> None:
    after = [
        Level(1, five(54.1), five(0.05), five(50.0), five(2.4)),
        Level(32, five(1731.2), five(0.2), five(1500.0)),
    ]
    before = [Level(1, five(75.0), five(0.04), five(70.0)), Level(32, five(2400.0))]
    verdict = judge(after, before, baseline=True, min_ratio=RATIOS)
    assert verdict.figures == {
        "tokens_per_s": 54.1,
        "before_tokens_per_s": 75.0,
        "ratio": 0.721,
        "tokens_per_s_c1": 54.1,
        "samples_c1": 5,
        "ttft_s_c1": 0.05,
        "e2e_tokens_per_s_c1": 50.0,
        "accept_length_c1": 2.4,
        "before_tokens_per_s_c1": 75.0,
        "before_samples_c1": 5,
        "before_ttft_s_c1": 0.04,
        "before_e2e_tokens_per_s_c1": 70.0,
        "ratio_c1": 0.721,
        "ratio_low_c1": 0.721,
        "ratio_high_c1": 0.721,
        "min_ratio_c1": 1.0,
        "tokens_per_s_c32": 1731.2,
        "samples_c32": 5,
        "ttft_s_c32": 0.2,
        "e2e_tokens_per_s_c32": 1500.0,
        "before_tokens_per_s_c32": 2400.0,
        "before_samples_c32": 5,
        "ratio_c32": 0.721,
        "ratio_low_c32": 0.721,
        "ratio_high_c32": 0.721,
        "min_ratio_c32": 0.9,
    }
    assert verdict.regressed == [1, 32]
    assert verdict.summary == (
        "concurrency 1: 54.1 tok/s vs 75.0 before (x0.72, 95 % interval x0.72-x0.72); "
        "concurrency 32: 1731.2 tok/s vs 2400.0 before (x0.72, 95 % interval x0.72-x0.72)"
    )
    alone = judge(after, None, baseline=True, min_ratio=1.0, no_baseline_reason="not running")
    assert alone.summary.endswith("; no baseline: not running")
    assert "before_tokens_per_s" not in alone.figures


@pytest.mark.parametrize(("high", "expected"), [(1, [1]), (4, [1, 4]), (16, [1, 16])])
def test_levels_are_one_and_the_higher(high: int, expected: list[int]) -> None:
    assert concurrency_levels(high) == expected
    assert GateThroughputArgs(service="s", baseline="before", concurrency=high).levels() == expected


def test_gate_config() -> None:
    args = GateThroughputArgs(service="s", baseline="before")
    assert (args.samples, args.baseline_samples, args.max_samples) == (5, 10, 15)
    assert (args.levels(), args.tolerance) == ([1, 4], 0.03)
    assert args.load().warmup == 4  # one wave of the highest level
    assert len(args.prompts) > 1
    listed = GateThroughputArgs(
        service="s", baseline="before", concurrency="[1, 32]", min_ratio="[1.0, 0.9]"
    )
    assert listed.levels() == [1, 32] and listed.ratios() == {1: 1.0, 32: 0.9}
    from_cli = GateThroughputArgs(
        service="s", baseline="before", concurrency="1,8,32", min_ratio="0.95"
    )
    assert from_cli.ratios() == {1: 0.95, 8: 0.95, 32: 0.95}
    with pytest.raises(ValueError, match="samples"):
        GateThroughputArgs(service="s", baseline="before", samples=4)
    with pytest.raises(ValueError, match="max_samples 5 is below samples 8"):
        GateThroughputArgs(service="s", baseline="before", samples=8, max_samples=5)
    with pytest.raises(ValueError, match="min_ratio has 3 values for 2 levels"):
        GateThroughputArgs(service="s", baseline="before", concurrency=[1, 32], min_ratio=[1, 1, 1])
    with pytest.raises(ValueError, match="concurrency: 'x' is not a list of numbers"):
        GateThroughputArgs(service="s", baseline="before", concurrency="x")
    with pytest.raises(ValueError, match="requests is gone"):
        GateThroughputArgs.model_validate({"service": "s", "baseline": "before", "requests": 8})
    with pytest.raises(ValueError, match="prompt is gone"):
        GateThroughputArgs.model_validate({"service": "s", "baseline": "before", "prompt": "x"})
    with pytest.raises(ValueError, match="give min_tokens_per_s, baseline: before, or both"):
        GateThroughputArgs(service="s")
