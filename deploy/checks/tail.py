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
    lines = source.splitlines()
    # Only the lines compared are decoded (a file's tail, not its thousands of lines): the
    # check runs on every host, and the lines before them only count.
    end = len(lines)
    if ignore_blank:
        while end and not _text(lines[end - 1]).strip():
            end -= 1
    wanted = _without_trailing_blanks(list(expected)) if ignore_blank else list(expected)
    if not wanted:
        return []
    if end < len(wanted):
        return [
            f"{path}: has {end} line{'s' if end != 1 else ''}, "
            f"expected it to end with these {len(wanted)}: {wanted!r}"
        ]
    first = end - len(wanted)
    actual = [_text(line) for line in lines[first:end]]
    return [
        f"{path}:{first + index + 1}: expected {want!r}, found {got!r}"
        for index, (want, got) in enumerate(zip(wanted, actual, strict=True))
        if want != got
    ]


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


def _without_trailing_blanks(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]
