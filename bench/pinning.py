"""Which cores the hosts and the tool under test run on (``--pin-client``, ``--pin-hosts``).

On loopback the hosts' sshd daemons, their login shells and file helpers run on the
workstation's own cores, and on a small machine they take most of the CPU: a tool's own CPU
then hides in the hosts'. Pinning the daemons to some cores and the tool to others gives the
tool cores of its own, as a real workstation has, so that what it spends on its own shows in
its wall time. The daemons are pinned with ``sched_setaffinity`` after they start (every
session sshd forks later inherits it); the tool is started through ``taskset -c``, which execs
it in place, so its pid, session and children are the tool's own.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from dataclasses import dataclass

from bench.fleet import Fleet


def parse_cpus(text: str) -> frozenset[int]:
    """A CPU list in taskset's format (``0``, ``0,2``, ``0-3``, ``0-1,4``) as a set.

    Raises:
        argparse.ArgumentTypeError: not such a list, or a CPU this machine does not have.
    """
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            first, last = int(low), int(high or low)
            if first < 0 or last < first:
                raise ValueError(part)
            cpus.update(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a CPU list such as 0, 0,2 or 0-3, not {text!r}"
        ) from None
    have = os.cpu_count() or 1
    if max(cpus) >= have:
        raise argparse.ArgumentTypeError(
            f"CPU {max(cpus)} does not exist ({have} cores: 0-{have - 1})"
        )
    return frozenset(cpus)


def cpu_list(cpus: Iterable[int]) -> str:
    """A set of CPUs in taskset's format, ranges folded: {0, 1, 2, 5} -> ``0-2,5``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = ordered[0] if ordered else -1
    for cpu in [*ordered[1:], -2]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


@dataclass(frozen=True)
class Placement:
    """Where the tool under test and the hosts run; ``None``: anywhere (not pinned)."""

    client: frozenset[int] | None = None
    hosts: frozenset[int] | None = None

    @property
    def pinned(self) -> bool:
        return self.client is not None

    @property
    def name(self) -> str:
        """A table column's word for it."""
        return "pinned" if self.pinned else "unpinned"

    def describe(self) -> str:
        """One sentence for the page."""
        if self.client is None or self.hosts is None:
            return "not pinned: the tools and the hosts' daemons share every core"
        return (
            f"the tool under test on CPU {cpu_list(self.client)} (`taskset -c`), the hosts' "
            f"sshd daemons and everything they start on CPU {cpu_list(self.hosts)}"
        )

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` started on the client's cores."""
        if self.client is None:
            return argv
        return ["taskset", "-c", cpu_list(self.client), *argv]

    def apply_hosts(self, fleet: Fleet) -> int:
        """Pin (or, unpinned, free) every running process of ``fleet``'s daemons; how many."""
        cpus = self.hosts if self.hosts is not None else set(range(os.cpu_count() or 1))
        moved = 0
        for host in fleet.hosts:
            for pid in host.processes():
                try:
                    os.sched_setaffinity(pid, cpus)
                except (ProcessLookupError, PermissionError):
                    continue  # a session that just ended
                moved += 1
        return moved


def from_options(client: frozenset[int] | None, hosts: frozenset[int] | None) -> Placement:
    """The pinned placement the options ask for (both or neither).

    Raises:
        argparse.ArgumentTypeError: only one of them, or the two overlap.
    """
    if (client is None) != (hosts is None):
        raise argparse.ArgumentTypeError("--pin-client and --pin-hosts go together")
    if client is not None and hosts is not None and client & hosts:
        raise argparse.ArgumentTypeError(
            f"--pin-client and --pin-hosts share CPU {cpu_list(client & hosts)}"
        )
    return Placement(client, hosts)
