"""deploy.checks.throughput: the gate's medians, tolerance and no-baseline rule, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.checks.throughput import Level, concurrency_levels, judge, levels_from_records, rate
from deploy.services.load import request_body
from deploy.steps.gate_throughput import GateThroughputArgs


def levels(**medians: tuple[float, ...]) -> list[Level]:
    """``levels(c1=(a, b, c), c4=(...))``."""
    return [Level(int(key[1:]), samples) for key, samples in medians.items()]


def test_rate_and_median() -> None:
    assert rate(64, 0.5) == 128.0
    assert rate(0, 1.0) == 0.0 and rate(10, 0.0) == 0.0
    assert Level(1, (75.0, 10.0, 74.0)).median == 74.0  # one outlier does not decide
    assert Level(1, (1.0, 2.0, 3.0, 100.0)).median == 2.5
    assert Level(1, ()).median == 0.0


def test_records_round_trip_and_garbage_is_no_baseline() -> None:
    measured = levels(c1=(75.04, 74.9, 75.3), c4=(300.0, 299.0, 301.0))
    assert levels_from_records([level.to_record() for level in measured]) == [
        Level(1, (75.04, 74.9, 75.3)),
        Level(4, (300.0, 299.0, 301.0)),
    ]
    for garbage in (None, [], 75.0, [{"concurrency": 1}], "x"):
        assert levels_from_records(garbage) is None


@pytest.mark.parametrize(("high", "expected"), [(1, [1]), (4, [1, 4]), (16, [1, 16])])
def test_levels_are_one_and_the_higher(high: int, expected: list[int]) -> None:
    assert concurrency_levels(high) == expected
    assert GateThroughputArgs(service="s", baseline="before", concurrency=high).levels() == expected


BEFORE = levels(c1=(75.0, 74.0, 76.0), c4=(300.0, 296.0, 304.0))

# (id, after, before, keyword arguments, passes, words in the problems)
CASES: list[tuple[str, list[Level], list[Level] | None, dict[str, Any], bool, list[str]]] = [
    (
        "the motivating regression: EAGLE-3 at 54.1 against 75",
        levels(c1=(54.1, 54.0, 54.2), c4=(216.4, 216.0, 217.0)),
        BEFORE,
        {},
        False,
        ["54.1 tok/s at concurrency 1 is x0.72 of the 75.0", "concurrency 4 is x0.72"],
    ),
    (
        "EAGLE-3 working: 96.1 against 75",
        levels(c1=(96.1, 96.0, 96.3), c4=(384.4, 380.0, 390.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "within the tolerance: x0.98 passes min_ratio 1.0",
        levels(c1=(73.5, 73.5, 73.5), c4=(294.0, 294.0, 294.0)),
        levels(c1=(75.0, 75.0, 75.0), c4=(300.0, 300.0, 300.0)),
        {},
        True,
        [],
    ),
    (
        "noisy samples leave x0.98 undecided: it fails and says so",
        levels(c1=(73.5, 71.0, 76.0, 73.5, 70.5), c4=(294.0, 294.0, 294.0)),
        BEFORE,
        {},
        False,
        ["at concurrency 1 is x0.98", "undecided, the samples' spread (5 after, 3 before)"],
    ),
    (
        "noisy but clearly faster: passes",
        levels(c1=(96.1, 90.0, 101.0, 94.0, 99.0), c4=(384.0, 370.0, 400.0, 380.0, 390.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "noisy but clearly slower (54.1 against 75): fails, decided",
        levels(c1=(54.1, 50.0, 58.0, 52.0, 56.0), c4=(300.0, 300.0, 300.0)),
        BEFORE,
        {},
        False,
        ["54.1 tok/s at concurrency 1 is x0.72 of the 75.0"],
    ),
    (
        "per-level ratios: 10 % slower under load is allowed, 20 % is not",
        levels(c1=(75.0, 75.0, 75.0), c32=(2700.0, 2700.0, 2700.0)),
        levels(c1=(75.0, 75.0, 75.0), c32=(3000.0, 3000.0, 3000.0)),
        {"min_ratio_loaded": 0.9},
        True,
        [],
    ),
    (
        "per-level ratios: EAGLE-3 wins alone and loses at production load",
        levels(c1=(96.1, 96.1, 96.1), c32=(2400.0, 2400.0, 2400.0)),
        levels(c1=(75.0, 75.0, 75.0), c32=(3000.0, 3000.0, 3000.0)),
        {"min_ratio_loaded": 0.9},
        False,
        ["at concurrency 32 is x0.80 of the 3000.0 tok/s before the change (need x0.9"],
    ),
    (
        "just outside the tolerance: x0.96 fails min_ratio 1.0",
        levels(c1=(72.0, 72.0, 72.0), c4=(300.0, 300.0, 300.0)),
        BEFORE,
        {},
        False,
        ["x0.96", "need x1 within 3%, x0.97"],
    ),
    (
        "no tolerance: x0.99 fails",
        levels(c1=(74.25, 74.25, 74.25), c4=(300.0, 300.0, 300.0)),
        BEFORE,
        {"tolerance": 0.0},
        False,
        ["x0.99"],
    ),
    (
        "faster at concurrency 1, slower under load: fails on the loaded level",
        levels(c1=(96.1, 96.1, 96.1), c4=(200.0, 200.0, 200.0)),
        BEFORE,
        {},
        False,
        ["at concurrency 4 is x0.67"],
    ),
    (
        "one bad sample cannot fail it (median)",
        levels(c1=(20.0, 96.0, 97.0), c4=(384.0, 10.0, 390.0)),
        BEFORE,
        {},
        True,
        [],
    ),
    (
        "one lucky sample cannot pass it (median)",
        levels(c1=(54.0, 500.0, 54.2), c4=(216.0, 217.0, 9000.0)),
        BEFORE,
        {},
        False,
        ["x0.72"],
    ),
    (
        "no baseline and no floor: fails",
        levels(c1=(96.1, 96.1, 96.1), c4=(384.0, 384.0, 384.0)),
        None,
        {"no_baseline_reason": "old server was not running"},
        False,
        ["no baseline to compare with (old server was not running)", "set min_tokens_per_s"],
    ),
    (
        "no baseline, floor met: passes",
        levels(c1=(96.1, 96.1, 96.1), c4=(384.0, 384.0, 384.0)),
        None,
        {"min_tokens_per_s": 80},
        True,
        [],
    ),
    (
        "no baseline, under the floor: fails",
        levels(c1=(54.1, 54.1, 54.1), c4=(384.0, 384.0, 384.0)),
        None,
        {"min_tokens_per_s": 80},
        False,
        ["54.1 tok/s at concurrency 1 is below the floor of 80"],
    ),
    (
        "floor only (no baseline wanted), met",
        levels(c1=(96.1, 96.1, 96.1)),
        None,
        {"baseline": False, "min_tokens_per_s": 90},
        True,
        [],
    ),
    (
        "baseline and floor both apply",
        levels(c1=(96.1, 96.1, 96.1), c4=(384.0, 384.0, 384.0)),
        BEFORE,
        {"min_tokens_per_s": 100},
        False,
        ["below the floor of 100"],
    ),
    (
        "min_ratio 1.2 asks for a real speed-up",
        levels(c1=(80.0, 80.0, 80.0), c4=(320.0, 320.0, 320.0)),
        BEFORE,
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
    options: dict[str, Any] = {"baseline": True, "min_ratio": 1.0, **kwargs}
    verdict = judge(after, before, **options)
    assert verdict.passed is passes, verdict.problems
    problems = "; ".join(verdict.problems)
    for word in words:
        assert word in problems


def test_figures_and_summary_per_concurrency() -> None:
    after = levels(c1=(54.1, 54.0, 54.2), c4=(216.4, 216.0, 217.0))
    verdict = judge(after, BEFORE, baseline=True, min_ratio=1.0)
    assert verdict.figures == {
        "tokens_per_s": 54.1,
        "before_tokens_per_s": 75.0,
        "ratio": 0.721,
        "tokens_per_s_c1": 54.1,
        "before_tokens_per_s_c1": 75.0,
        "ratio_c1": 0.721,
        "tokens_per_s_c4": 216.4,
        "before_tokens_per_s_c4": 300.0,
        "ratio_c4": 0.721,
    }
    assert verdict.summary == (
        "concurrency 1: 54.1 tok/s vs 75.0 before (x0.72 ±0.02); "
        "concurrency 4: 216.4 tok/s vs 300.0 before (x0.72 ±0.02)"
    )
    alone = judge(after, None, baseline=True, min_ratio=1.0, no_baseline_reason="not running")
    assert alone.summary.endswith("; no baseline: not running")
    assert "before_tokens_per_s" not in alone.figures


def test_gate_config() -> None:
    args = GateThroughputArgs(service="s", baseline="before")
    assert (args.samples, args.warmup, args.concurrency, args.tolerance) == (5, 2, 4, 0.03)
    assert (args.max_samples, args.min_ratio_loaded) == (15, None)
    with pytest.raises(ValueError, match="samples"):
        GateThroughputArgs(service="s", baseline="before", samples=4)
    with pytest.raises(ValueError, match="max_samples must be at least samples"):
        GateThroughputArgs(service="s", baseline="before", samples=8, max_samples=6)
    levels = GateThroughputArgs(service="s", baseline="before", concurrency="[1, 32]")
    assert levels.levels() == [1, 32]
    assert GateThroughputArgs(service="s", baseline="before", concurrency=[8, 32]).levels() == [
        1,
        8,
        32,
    ]
    with pytest.raises(ValueError, match="at least 1"):
        GateThroughputArgs(service="s", baseline="before", concurrency=[0, 4])
    with pytest.raises(ValueError, match="requests is gone"):
        GateThroughputArgs.model_validate({"service": "s", "baseline": "before", "requests": 8})
    with pytest.raises(ValueError, match="give min_tokens_per_s, baseline: before, or both"):
        GateThroughputArgs(service="s")


def test_every_request_generates_the_same_fixed_length() -> None:
    args = GateThroughputArgs(service="s", baseline="before", max_new_tokens=128)
    assert request_body(args.load()) == {
        "text": args.prompt,
        "sampling_params": {"max_new_tokens": 128, "ignore_eos": True, "temperature": 0},
    }
