"""The page's "Targets (issue 17)" section: each target met everywhere, or where it was missed.

The verdicts are `bench.targets`'; this words them, and for the anchors' targets adds what a
tool exactly as fast as the floor would have scored in the same cell, so that a target out of
reach of this machine reads as such.
"""

from __future__ import annotations

from collections import defaultdict

from bench import targets
from bench.markdown import KIND_LABEL, column
from bench.results import Results


def targets_section(results: Results) -> list[str]:
    """Issue 17's targets, one line each: met everywhere, or where missed and by how much."""
    found = targets.checks(results)
    if not found:
        return []
    lines = ["## Targets (issue 17)", ""]
    groups: dict[str, list[targets.Check]] = defaultdict(list)
    for check in found:
        if check.target == "deploy ÷ floor":
            where = "loopback" if check.rtt == 0 else "RTT > 0"
            name = f"`deploy` {KIND_LABEL[check.kind]} ÷ floor ≤ {check.limit:g}× ({where})"
        elif check.at_most:
            name = f"`deploy` ≤ the plain Fabric script ({KIND_LABEL[check.kind]})"
        else:
            anchor = check.target.split()[0]
            name = (
                f"{anchor} ≥ {check.limit:g}× `deploy` at N ≥ {targets.ANCHOR_HOSTS} "
                f"({KIND_LABEL[check.kind]})"
            )
        groups[name].append(check)
    for name, group in groups.items():
        missed = [c for c in group if not c.met]
        cells = ", ".join(f"{column(c.rtt, c.hosts)}: {_found(results, c)}" for c in group)
        verdict = "**missed**" if missed else "met"
        lines.append(f"- {name}: {verdict} — {cells}")
    return [*lines, ""]


def _found(results: Results, check: targets.Check) -> str:
    """A check's ratio; for an anchor's, also the most any tool could score in that cell.

    "anchor ÷ deploy" cannot exceed "anchor ÷ floor" unless deploy beats the floor, so where
    the anchor is not that many times the floor itself the target is out of reach on this
    machine (on loopback the hosts' login shells share its cores with every tool).
    """
    text = f"{check.ratio:.2f}×"
    if check.at_most:
        return text
    anchor = check.target.split()[0]
    ceiling = targets.ceiling(results, anchor, check.kind, check.hosts, check.rtt)
    if ceiling is not None:
        text += f" (a tool at the floor: {ceiling:.2f}×)"
    return text
