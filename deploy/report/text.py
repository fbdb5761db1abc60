"""Plain-text layout for the terminal: host prefixes, terminal width, cells shortened in the
middle, aligned tables fitted to a width. Pure: no I/O but asking how wide the terminal is."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence


def own(host: str, text: str) -> str:
    """``text`` without the ``host: `` prefixes lower layers put in their messages.

    An error raised on a host names it (it may travel alone, e.g. in a log); where the host
    is already named at the start of the line, saying it again is noise.
    """
    prefix = f"{host}: "
    while text.startswith(prefix):
        text = text[len(prefix) :]
    return text.replace(f": {prefix}", ": ")


def terminal_width() -> int | None:
    """Columns to fit tables into: ``$COLUMNS``, else stdout's terminal's; None (no limit)
    when stdout is no terminal: a log, a pipe or a cron mail loses nothing to a cut."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return max(40, int(columns))
    try:
        return max(40, os.get_terminal_size(sys.__stdout__.fileno()).columns)  # type: ignore[union-attr]
    except (OSError, AttributeError, ValueError):
        return None


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (``/opt/…/models/kimi_k25.py``).

    The end of a path (the file name) and its start (which tree) say the most; the tail gets
    the larger share.
    """
    if len(text) <= width:
        return text
    if width < 5:
        return text[:width]
    head = (width - 1) // 3
    tail = width - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]


def table_lines(
    headers: list[str],
    rows: list[list[str]],
    *,
    shrink: Sequence[int] = (),
    width: int | None = None,
    style: Callable[[int, str, str], str] | None = None,
) -> list[str]:
    """Aligned columns fitted to ``width`` (default: the terminal's) by shortening the
    ``shrink`` columns' cells in the middle, widest column first, never below 12 characters."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    limit = width or terminal_width()
    excess = 0 if limit is None else sum(widths) + 2 * (len(widths) - 1) - limit
    while excess > 0:
        room = [i for i in shrink if widths[i] > max(12, len(headers[i]))]
        if not room:
            break
        widest = max(room, key=lambda i: widths[i])
        cut = min(excess, widths[widest] - max(12, len(headers[widest])))
        widths[widest] -= cut
        excess -= cut
    lines = []
    for row in [headers, *rows]:
        cells = []
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            short = shorten_middle(cell, w) if i in shrink else cell
            padded = short.ljust(w)
            cells.append(style(i, padded, cell) if style and row is not headers else padded)
        lines.append("  ".join(cells).rstrip())
    return lines
