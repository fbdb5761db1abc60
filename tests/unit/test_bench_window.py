"""The bench's congestion-window model (bench/window.py) behaves as Linux's TCP sender on a
fresh connection: 10 segments first, doubling per RTT while the window is used, no growth
for a trickle, back to the initial window after an idle RTO."""

from __future__ import annotations

from bench.window import INITIAL_SEGMENTS, MSS, Window, flights

IW = INITIAL_SEGMENTS * MSS


def test_a_burst_within_the_initial_window_leaves_in_one_flight() -> None:
    assert flights(1) == 1
    assert flights(IW) == 1


def test_a_larger_burst_waits_for_acks_and_the_window_doubles_per_round_trip() -> None:
    """10, then 20, then 40 segments: 45 KB (deploy's old lock exec) took three flights."""
    assert flights(IW + 1) == 2
    assert flights(3 * IW) == 2
    assert flights(3 * IW + 1) == 3
    assert flights(45_506) == 3
    assert flights(7 * IW) == 3
    assert flights(7 * IW + 1) == 4


def test_the_window_opens_only_when_acks_come_back() -> None:
    window = Window(rtt=0.1)
    assert window.room(0.0) == IW
    window.sent(0.0, IW)
    assert window.room(0.05) == 0
    assert window.next_ack() == 0.1
    assert window.room(0.1) == 2 * IW


def test_a_trickle_of_small_messages_does_not_grow_the_window() -> None:
    """Linux grows the window in slow start only while the sender is using it (bytes in
    flight at least half of it): the handshake's small messages leave it at 10 segments."""
    window = Window(rtt=0.1)
    now = 0.0
    for _ in range(20):
        assert window.room(now) >= 1000
        window.sent(now, 1000)
        now += 0.1
    assert window.room(now) == IW


def test_after_an_idle_rto_the_window_falls_back_to_the_initial_one() -> None:
    window = Window(rtt=0.1)
    window.sent(0.0, IW)
    window.room(0.1)
    window.sent(0.1, 2 * IW)
    assert window.room(0.2) == 4 * IW
    # Idle for less than one RTO (0.1 + 0.2 s): the window is kept.
    assert window.room(0.1 + 0.29) == 4 * IW
    # Idle for two RTOs: halved twice (4 -> 1 initial window), not below the initial one.
    assert window.room(0.1 + 0.61) == IW
    assert Window(rtt=0.1).room(5.0) == IW


def test_asking_for_room_while_idle_does_not_shrink_the_window_again() -> None:
    window = Window(rtt=0.1)
    window.sent(0.0, IW)
    window.room(0.1)
    window.sent(0.1, 2 * IW)
    assert [window.room(0.2 + 0.31) for _ in range(3)] == [2 * IW] * 3
