"""`deploy.trace`: spans reach subscribers with their detail, and cost nothing unheard."""

from __future__ import annotations

import pytest

from deploy import trace


@trace.spanned("test.double", lambda value: f"of {value}")
def double(value: int) -> int:
    return value * 2


def test_spans_reach_a_subscriber_with_detail_and_order() -> None:
    heard: list[tuple[str, str, float, float]] = []
    stop = trace.subscribe(lambda *event: heard.append(event))
    try:
        with trace.span("test.outer", "x"):
            assert double(3) == 6
    finally:
        stop()
    (inner, outer) = heard
    assert (inner[:2], outer[:2]) == (("test.double", "of 3"), ("test.outer", "x"))
    assert outer[2] <= inner[2] <= inner[3] <= outer[3]


def test_a_span_that_raises_is_still_reported() -> None:
    heard: list[str] = []
    stop = trace.subscribe(lambda name, *_: heard.append(name))
    try:
        with pytest.raises(ZeroDivisionError), trace.span("test.fails"):
            _ = 1 / 0
    finally:
        stop()
    assert heard == ["test.fails"]


def test_nothing_is_computed_when_nobody_listens() -> None:
    def detail(value: int) -> str:
        raise AssertionError("detail computed with no listener")

    @trace.spanned("test.quiet", detail)
    def quiet(value: int) -> int:
        return value

    assert quiet(1) == 1
    assert trace.span("test.quiet") is trace.span("test.other")  # one shared no-op


def test_hooked_names_are_documented() -> None:
    assert all(name.count(".") == 1 and text for name, text in trace.SPANS.items())
