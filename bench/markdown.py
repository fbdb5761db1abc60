"""Markdown pieces shared by the pages the bench writes."""

from __future__ import annotations

KIND_LABEL = {"change": "change run", "rerun": "no-change re-run", "connect": "connect + `true`"}


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
