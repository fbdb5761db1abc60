"""Check how a file ends: the last lines must be exactly the expected ones.

A cheap, exact check for files whose meaning sits at the end (a config's closing block, or a
module that must still end with ``EntryClass = [...]`` after an edit). It compares text lines
without their endings, so it holds for CRLF files too. Nothing here performs I/O.
"""

from __future__ import annotations


def check_tail(
    source: bytes, expected: list[str], *, ignore_blank: bool = True, path: str = "<file>"
) -> list[str]:
    """The problems found, one line each (empty: the file ends with ``expected``).

    Lines are split on CRLF, LF and CR and decoded as UTF-8 (invalid bytes shown as U+FFFD).
    With ``ignore_blank`` (the default), blank or whitespace-only lines at the end of the file,
    and at the end of ``expected``, are left out of the comparison; otherwise they count.
    Each differing line is reported as ``PATH:LINE: expected '...', found '...'``.
    """
    actual = [line.decode("utf-8", errors="replace") for line in source.splitlines()]
    wanted = list(expected)
    if ignore_blank:
        actual = _without_trailing_blanks(actual)
        wanted = _without_trailing_blanks(wanted)
    if not wanted:
        return []
    if len(actual) < len(wanted):
        return [
            f"{path}: has {len(actual)} line{'s' if len(actual) != 1 else ''}, "
            f"expected it to end with these {len(wanted)}: {wanted!r}"
        ]
    first = len(actual) - len(wanted)
    return [
        f"{path}:{first + index + 1}: expected {want!r}, found {got!r}"
        for index, (want, got) in enumerate(zip(wanted, actual[first:], strict=True))
        if want != got
    ]


def _without_trailing_blanks(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]
