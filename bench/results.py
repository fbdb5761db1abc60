"""What one benchmark run measured, keyed by tool, fleet size, round-trip time and kind of run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.runner import Series
from bench.wire import Probe

#: A series' key: (tool, hosts, RTT in ms, kind of run: "change", "rerun" or "connect").
Key = tuple[str, int, int, str]


@dataclass
class Results:
    """Everything one benchmark run measured."""

    sizes: list[int]
    tools: list[str]
    repeat: int
    command: str
    budget: dict[str, dict[str, int]]
    deploy_command: str
    #: The round-trip times measured, in ms (0: straight to the hosts on loopback).
    rtts: list[int] = field(default_factory=lambda: [0])
    #: The delay proxy's initial congestion window in segments (`bench.window`; 0: none).
    initial_window: int = 10
    series: dict[Key, Series] = field(default_factory=dict)
    ops: dict[tuple[int, str], list[dict[str, Any]]] = field(default_factory=dict)
    profiles: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    cli: dict[str, Series] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    #: (hosts, RTT) -> why that combination was not measured.
    skipped_rtt: dict[tuple[int, int], str] = field(default_factory=dict)
    spent: dict[int, float] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)
    #: Fleet size -> the load averages when its measurements began.
    load: dict[int, str] = field(default_factory=dict)
    #: The picture beside the tables (a path relative to the page), if it was drawn.
    plot: str | None = None
    #: ``--baseline-ref``: the revision the ``deploy-baseline`` tool runs.
    baseline_ref: str | None = None
    #: Every SSH wait of one run of each kind at ``wire_rtt`` ms (`bench.wire`).
    wire: list[Probe] = field(default_factory=list)
    wire_rtt: float = 0.0

    def all_ok(self) -> bool:
        """No wrong result, no failed run, nothing missing: the exit status of the bench."""
        every = [*self.series.values(), *self.cli.values()]
        return (
            all(s.ok and not s.failures for s in every)
            and not self.skipped
            and not self.skipped_rtt
        )

    def median(self, tool: str, count: int, rtt: int, kind: str) -> float | None:
        found = self.series.get((tool, count, rtt, kind))
        return found.median if found is not None and found.ok else None

    def columns(self) -> list[tuple[int, int]]:
        """(RTT, hosts) pairs that have at least one series, RTT first, in measured order."""
        have = {(rtt, count) for (_, count, rtt, _) in self.series}
        return [(r, n) for r in self.rtts for n in self.sizes if (r, n) in have]
