"""Plain-text layout for the terminal: host prefixes, terminal width, cells shortened in the
middle, lines wrapped under a prefix, aligned tables fitted to a width. Pure: no I/O but asking
how wide the terminal is and whether it can show ``…``.

The rules every human rendering follows (issue 34): a line fits the width when there is one
(``$COLUMNS``, else the terminal's); a host name is never cut (it is what an operator greps
for and types back); free text (an error, an undo action) is wrapped, never cut; only what is
also in ``deploy show`` and ``--json`` (a path, a title) is shortened, with ``…`` (``...``
under ``TERM=dumb``, which may not have the glyph). Secrets are masked before a text is
wrapped or shortened: the terminal's masking sees one line at a time, and a secret split over
two lines or cut short would match on neither.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import IO, Literal

from deploy.masking import mask


def own(host: str, text: str) -> str:
    """``text`` without the ``host: `` prefixes lower layers put in their messages.

    An error raised on a host names it (it may travel alone, e.g. in a log); where the host
    is already named at the start of the line, saying it again is noise.
    """
    prefix = f"{host}: "
    while text.startswith(prefix):
        text = text[len(prefix) :]
    return text.replace(f": {prefix}", ": ")


#: A width that limits nothing, for a rendering that goes to a file (a log, a webhook).
NO_LIMIT = 1 << 20


def terminal_width(stream: IO[str] | None = None) -> int | None:
    """Columns to fit lines into: ``$COLUMNS``, else the terminal's that ``stream`` (default:
    stdout) writes to; None (no limit) when it is no terminal: a log, a pipe or a cron mail
    loses nothing to a cut."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return max(40, int(columns))
    try:
        target = stream if stream is not None else sys.__stdout__
        return max(40, os.get_terminal_size(target.fileno()).columns)  # type: ignore[union-attr]
    except (OSError, AttributeError, ValueError):
        return None


def ellipsis() -> str:
    """``…``, or ``...`` on a terminal that declares no capabilities (``TERM=dumb``)."""
    return "..." if os.environ.get("TERM") == "dumb" else "…"


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (``/opt/…/models/kimi_k25.py``).

    The end of a path (the file name) and its start (which tree) say the most; the tail gets
    the larger share.
    """
    text = mask(text)
    if len(text) <= width:
        return text
    mark = ellipsis()
    if width < 4 + len(mark):
        return text[:width]
    head = (width - len(mark)) // 3
    tail = width - len(mark) - head
    return text[:head] + mark + text[len(text) - tail :]


def shorten_end(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at the end (a title: its start says most)."""
    text = mask(text)
    if len(text) <= width:
        return text
    mark = ellipsis()
    if width <= len(mark):
        return text[:width]
    return text[: width - len(mark)].rstrip() + mark


def wrap(
    text: str,
    width: int | None,
    first: str = "",
    rest: str | None = None,
    *,
    long_words: Literal["split", "shorten", "keep"] = "split",
) -> list[str]:
    """``first + text`` as lines of at most ``width``, continued under ``rest`` (default: as
    many spaces as ``first``). With no width, one line.

    A word longer than a line (a path) is split, so nothing is lost; ``shorten`` shortens it
    in the middle instead (for text whose paths ``deploy show`` has whole), ``keep`` gives it
    a line of its own, however wide (``-v``: paths whole).
    """
    rest = " " * len(first) if rest is None else rest
    text = mask(text)
    if width is None or len(first) + len(text) <= width:
        return [first + text]
    room = max(width, len(first) + 20, len(rest) + 20)
    if (
        long_words == "shorten"
    ):  # on the first line if 30 columns are left there, else on a line of its own
        words = text.split(" ")
        for index, word in enumerate(words):
            before = len(first) + len(" ".join(words[:index])) + (1 if index else 0)
            if len(word) > room - max(len(first), len(rest)):
                fits = room - before if room - before >= 30 else room - len(rest)
                words[index] = shorten_middle(word, fits)
        text = " ".join(words)
    return textwrap.wrap(
        text,
        room,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
        break_long_words=long_words != "keep",
        drop_whitespace=True,
    ) or [first.rstrip()]


def wrap_items(
    items: Sequence[str], width: int | None, first: str, rest: str | None = None
) -> list[str]:
    """``items`` joined by ``, `` in lines of at most ``width``, never splitting an item (a
    host name), continued under ``rest``. An item longer than a line gets a line of its own."""
    rest = " " * len(first) if rest is None else rest
    lines: list[str] = []
    line = first
    for index, item in enumerate(items):
        piece = item + ("," if index < len(items) - 1 else "")
        fresh = line in (first, rest)
        candidate = line + ("" if fresh else " ") + piece
        if width is not None and not fresh and len(candidate) > width:
            lines.append(line)
            line = rest + piece
        else:
            line = candidate
    lines.append(line)
    return lines


def table_lines(
    headers: list[str],
    rows: list[list[str]],
    *,
    shrink: Sequence[int] = (),
    optional: Sequence[int] = (),
    wrap_last: bool = False,
    width: int | None = None,
    style: Callable[[int, str, str], str] | None = None,
) -> list[str]:
    """Aligned columns fitted to ``width`` (default: the terminal's).

    First the ``optional`` columns are left out, in the order given, while the table is too
    wide (they are in ``show`` and ``--json``); then the ``shrink`` columns' cells are
    shortened in the middle, widest column first, never below 12 characters. Returns one
    line for the headers and one per row, but for ``wrap_last``: the last column's cells
    (``a, b, c`` lists) are then wrapped at their commas, continued under the column.
    """
    limit = width or terminal_width()
    keep = list(range(len(headers)))

    def cell_width(i: int, cell: str) -> int:
        if wrap_last and i == len(headers) - 1:
            return max(len(item) + 1 for item in cell.split(", "))
        return len(cell)

    def total(columns: list[int]) -> int:
        return sum(max(cell_width(i, r[i]) for r in [headers, *rows]) for i in columns) + 2 * (
            len(columns) - 1
        )

    for column in optional:
        if limit is None or total(keep) <= limit:
            break
        keep.remove(column)
    headers = [headers[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    shrink = [keep.index(i) for i in shrink if i in keep]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    last = len(headers) - 1
    if wrap_last and limit is not None:
        start = sum(widths[:last]) + 2 * last
        widths[last] = min(widths[last], max(limit - start, len(headers[last])))
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
            cells.append(style(keep[i], padded, cell) if style and row is not headers else padded)
        if wrap_last and limit is not None and len(row[last]) > widths[last]:
            prefix = "  ".join(cells[:last]) + "  "
            lines.extend(wrap_items(row[last].split(", "), limit, prefix, " " * len(prefix)))
            continue
        lines.append("  ".join(cells).rstrip())
    return lines
