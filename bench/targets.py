"""Issue 17's targets, as numbers and as verdicts on a run's medians (bench figures, not tests).

- ``deploy``'s change run ÷ the floor: at most 1.3× on loopback, 1.5× at any RTT above 0;
  its no-change re-run ÷ the floor: at most 1.2× everywhere (N = 1 and 20);
- ansible-core at least 5× and pyinfra at least 2× slower than ``deploy`` at N = 20, on every
  RTT (both kinds of run);
- ``deploy`` no slower than the plain Fabric script anywhere (both kinds of run).

Each target is a ratio of two medians measured in the same run — on a machine shared with
other work the absolute seconds drift, but tools timed in turn drift alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.results import Results

#: deploy ÷ floor, change run: on loopback, and at an RTT above 0.
CHANGE_LOOPBACK = 1.3
CHANGE_REMOTE = 1.5
#: deploy ÷ floor, no-change re-run (any RTT).
RERUN = 1.2
#: anchor ÷ deploy, at least, at N >= ANCHOR_HOSTS.
ANCHOR_FACTOR = {"ansible": 5.0, "pyinfra": 2.0}
ANCHOR_HOSTS = 20


@dataclass(frozen=True)
class Check:
    """One target at one (RTT, N, kind): the ratio found and whether it is within the limit."""

    target: str
    rtt: int
    hosts: int
    kind: str
    ratio: float
    limit: float
    #: True: the ratio must be at most ``limit``; False: at least.
    at_most: bool

    @property
    def met(self) -> bool:
        return self.ratio <= self.limit if self.at_most else self.ratio >= self.limit


def _ratio(
    results: Results, top: tuple[str, str], bottom: tuple[str, str], n: int, rtt: int
) -> float | None:
    high = results.median(top[0], n, rtt, top[1])
    low = results.median(bottom[0], n, rtt, bottom[1])
    return None if high is None or low is None or low == 0 else high / low


def floor_limit(kind: str, rtt: int) -> float:
    """The most ``deploy`` ÷ floor may be for ``kind`` at ``rtt``."""
    if kind == "rerun":
        return RERUN
    return CHANGE_LOOPBACK if rtt == 0 else CHANGE_REMOTE


def checks(results: Results) -> list[Check]:
    """Every target that this run's medians can judge, cell by cell."""
    found: list[Check] = []
    for rtt, n in results.columns():
        for kind in ("change", "rerun"):
            ratio = _ratio(results, ("deploy", kind), ("floor", "connect"), n, rtt)
            if ratio is not None:
                limit = floor_limit(kind, rtt)
                found.append(Check("deploy ÷ floor", rtt, n, kind, ratio, limit, True))
            ratio = _ratio(results, ("deploy", kind), ("fabric", kind), n, rtt)
            if ratio is not None:
                found.append(Check("deploy ÷ Fabric script", rtt, n, kind, ratio, 1.0, True))
            if n < ANCHOR_HOSTS:
                continue
            for anchor, factor in ANCHOR_FACTOR.items():
                ratio = _ratio(results, (anchor, kind), ("deploy", kind), n, rtt)
                if ratio is not None:
                    found.append(Check(f"{anchor} ÷ deploy", rtt, n, kind, ratio, factor, False))
    return found


def ceiling(results: Results, anchor: str, kind: str, n: int, rtt: int) -> float | None:
    """``anchor`` ÷ floor: the "anchor ÷ deploy" a tool exactly as fast as the floor would get.

    Not a target; it says whether a missed anchor target was within reach of this machine.
    """
    return _ratio(results, (anchor, kind), ("floor", "connect"), n, rtt)
