"""Markdown pieces shared by the pages the bench writes."""

from __future__ import annotations

KIND_LABEL = {"change": "change run", "rerun": "no-change re-run", "connect": "connect + `true`"}


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def column(rtt: int, n: int) -> str:
    """A table column's name: where and how many hosts."""
    return f"{'loopback' if rtt == 0 else f'RTT {rtt} ms'}, N = {n}"
