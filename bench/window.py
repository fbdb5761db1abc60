"""`Window`: a TCP sender's congestion window, as Linux runs it on a fresh connection.

A delay proxy that only holds every chunk for half the RTT hides what a fresh TCP connection
on a real path costs: the sender may have only ``cwnd`` bytes unacknowledged, and ``cwnd``
starts at 10 segments (RFC 6928, Linux's default) and grows only as ACKs come back, one RTT
after the data left. So a 45 KB burst on a new connection takes three flights, two round
trips more than a 1 KB one; on loopback, and through a proxy whose legs are loopback
sockets, the same burst takes one. `bench.delay` applies this model to each direction of
each proxied connection, so the bench charges large bursts what a WAN charges them.

What is modelled, as Linux 6.x does it without losses:

- initial window ``segments`` × ``mss`` bytes (10 × 1448: a 1500-byte MTU with TCP
  timestamps);
- slow start: every byte acknowledged grows the window by one byte, but only for data sent
  while the sender was using its window (``tcp_is_cwnd_limited``: in slow start, bytes in
  flight at least half the window) — a trickle of small messages does not open it;
- an ACK comes back one RTT after the data was sent (no delayed ACKs, no receiver limit);
- restart after idle (``tcp_slow_start_after_idle``, on by default): a sender that had
  nothing in flight for longer than one RTO (the RTT plus Linux's 200 ms minimum) halves its
  window once per RTO elapsed, but not below the initial window.

Not modelled: losses and congestion avoidance (a clean path), pacing, the receive window.
Pure: the caller passes the clock, so the model is tested without sleeping.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: Linux's default initial window (RFC 6928) and the MSS of a 1500-byte MTU with timestamps.
INITIAL_SEGMENTS = 10
MSS = 1448
#: Linux's minimum retransmission timeout (``TCP_RTO_MIN``).
MIN_RTO = 0.200


@dataclass
class Window:
    """One direction of one connection: how many bytes may be sent now."""

    rtt: float
    segments: int = INITIAL_SEGMENTS
    mss: int = MSS
    cwnd: int = field(init=False)
    in_flight: int = field(init=False, default=0)
    #: (time the ACK comes back, bytes, sent while the window was in use), oldest first.
    _flight: deque[tuple[float, int, bool]] = field(init=False, default_factory=deque)
    _last_send: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.cwnd = self.initial

    @property
    def initial(self) -> int:
        return self.segments * self.mss

    @property
    def rto(self) -> float:
        return self.rtt + MIN_RTO

    def room(self, now: float) -> int:
        """Bytes that may be sent at ``now`` (0: wait for `next_ack`). Asking changes nothing
        but the ACKs received by ``now``: the same answer however often it is asked."""
        return max(0, self._window(now) - self.in_flight)

    def sent(self, now: float, size: int) -> None:
        """``size`` bytes (at most `room`) left at ``now``; their ACK is due one RTT later."""
        self.cwnd = self._window(now)
        self.in_flight += size
        limited = 2 * self.in_flight >= self.cwnd
        self._flight.append((now + self.rtt, size, limited))
        self._last_send = now

    def _window(self, now: float) -> int:
        """The window at ``now``: ACKs due by then taken in, and the restart after idle
        (applied to the window for good only when something is sent, as Linux does)."""
        while self._flight and self._flight[0][0] <= now:
            _, size, limited = self._flight.popleft()
            self.in_flight -= size
            if limited:
                self.cwnd += size
        if self.in_flight == 0 and self._last_send is not None:
            rounds = int((now - self._last_send) / self.rto)
            if rounds > 0:
                return max(self.cwnd >> rounds, min(self.cwnd, self.initial))
        return self.cwnd

    def next_ack(self) -> float | None:
        """When the oldest bytes in flight are acknowledged (None: nothing in flight)."""
        return self._flight[0][0] if self._flight else None


def flights(size: int, rtt: float = 0.1, segments: int = INITIAL_SEGMENTS) -> int:
    """How many round trips a burst of ``size`` bytes takes to leave a fresh connection."""
    window, now, count = Window(rtt, segments), 0.0, 0
    while size > 0:
        room = window.room(now)
        if room == 0:
            now = window.next_ack() or now
            continue
        window.sent(now, min(room, size))
        size -= min(room, size)
        count += 1
        now = window.next_ack() or now
    return count
