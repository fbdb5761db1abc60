"""How bench/wire.py reads a message log into waits, and the page section it writes."""

from __future__ import annotations

from typing import Any

from bench import wire
from bench.report import render
from bench.results import Results

RTT = 0.1


def log(*events: tuple[float, str, str]) -> list[dict[str, Any]]:
    """(ms, direction, message) -> the child's log lines (seconds, as time.monotonic gives)."""
    return [{"t": 0.0, "dir": "start"}] + [
        {"t": ms / 1000, "dir": d, "msg": m, "len": 1} for ms, d, m in events
    ]


FLOOR = log(
    (80, ">", "kexinit"),
    (81, "<", "kexinit"),  # sent with the server's banner: crosses ours, no wait
    (82, ">", "kex30"),
    (190, "<", "kex31"),
    (191, ">", "newkeys"),
    (192, ">", "service-request"),
    (193, "<", "newkeys"),
    (294, "<", "service-accept"),
    (295, ">", "userauth-request"),
    (400, "<", "userauth-success"),
    (401, ">", "channel-open"),
    (402, "<", "global-request"),  # unasked-for: arrives at once, not a wait
    (505, "<", "channel-open-success"),
    (506, ">", "channel-request"),
    (610, "<", "channel-window-adjust"),
    (610, "<", "channel-success"),
    (611, ">", "channel-eof"),
    (820, "<", "channel-eof"),
    (820, "<", "channel-request"),
)


def test_a_wait_is_an_answer_at_least_half_an_rtt_after_the_last_send() -> None:
    found = wire.waits(FLOOR, RTT)
    assert [got[0] for _, _, got in found] == [
        "kex31",
        "service-accept",
        "userauth-success",
        "channel-open-success",
        "channel-window-adjust",
        "channel-eof",
    ]
    assert found[1][1] == ["newkeys", "service-request"], "everything sent before the answer"
    assert round(found[-1][0]) == 209
    assert wire.causes("floor", found)[-1].startswith("the command's end")


def test_deploy_waits_are_named_in_order_and_unexpected_data_is_said() -> None:
    lines = (
        FLOOR[:-3]
        + log(
            (611, ">", "channel-data"),
            (820, "<", "channel-data"),
            (830, ">", "channel-data"),
            (935, "<", "channel-data"),
            (936, ">", "channel-data"),
            (1040, "<", "channel-data"),
            (1041, ">", "channel-data"),
            (1150, "<", "channel-data"),
        )[1:]
    )
    found = wire.waits(lines, RTT)
    what = wire.causes("deploy change run", found)
    assert len(found) == 9
    assert what[5].startswith("the lock's answer")
    assert what[6].startswith("the batch") and "commit" in what[6]
    assert "not expected" in what[7] and "not expected" in what[8]


def test_the_page_shows_the_waits_and_how_they_compare_with_the_floor() -> None:
    probes = [
        wire.Probe("floor", wire.waits(FLOOR, RTT), 1.0, 0, 80.0),
        wire.Probe("deploy no-change re-run", wire.waits(FLOOR, RTT), 1.3, 0, 380.0),
    ]
    results = Results(
        sizes=[1], tools=["deploy", "floor"], repeat=1, command="x", budget={}, deploy_command="x"
    )
    results.wire, results.wire_rtt = probes, 100.0
    page = render(results)
    assert "## Where the round trips go" in page
    assert "re-run waits +0 time(s) against the floor" in page
    assert "+300 ms later" in page
    assert "| 3 | 105 | userauth-request | userauth-success |" in page
