"""``lineinfile``'s text logic: one line made present (or absent) in a file, as Ansible does it.

Ansible's ``lineinfile`` (``lib/ansible/modules/lineinfile.py``) semantics, kept where sound:

- ``present`` with ``regexp``: the *last* line the regexp matches (``re.search``) is replaced by
  ``line``; with no match, a line already equal to ``line`` is no change, else ``line`` is
  inserted after the last line ``insertafter`` matches (``EOF``, the default: at the end) or
  before the last line ``insertbefore`` matches (``BOF``: at the start); an anchor regexp that
  matches nothing inserts at the end. Right after the ``insertafter`` match, a line already
  equal to ``line`` is no change.
- ``backrefs``: ``line`` is expanded from the match (``\\1``, ``\\g<name>``); with no match
  the file is left alone (a line cannot be built without its groups).
- ``absent``: every line the regexp matches (or, without a regexp, every line equal to
  ``line``) is removed.

Where this differs from Ansible, on purpose:

- Bytes are kept: the line added takes the file's own line ending (CRLF stays CRLF; Ansible
  writes ``os.linesep``), and a line that is already right is no change even when it is the last
  line without a final newline (Ansible rewrites it to add one, reporting a change on every
  run of a file written without one).
- A line inserted after a last line that lacks its newline goes on a line of its own
  (Ansible appends it to that line: ``anchor`` + ``z`` gives ``anchorz``).
- Regexps see each line without its ending, so ``value$`` also matches in a CRLF file (Ansible
  matches the line with its ``\\n``, where ``$`` works for LF only).
- ``line`` is one line: a newline in it is refused when the playbook is loaded (Ansible writes it,
  and the next run no longer finds the line it wrote: never idempotent). Blocks are ``append``.
- Text is decoded as UTF-8 with ``surrogateescape``: any other byte passes through unchanged.

Nothing here performs I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from deploy.edits.result import EditResult
from deploy.edits.text import detect_newline, line_ending, strip_ending
from deploy.errors import EditError

_CODEC = ("utf-8", "surrogateescape")


@dataclass(frozen=True)
class LineSpec:
    """What ``lineinfile`` is asked for (validated by the step's model before it gets here)."""

    line: str | None = None
    regexp: str | None = None
    state: Literal["present", "absent"] = "present"
    insertafter: str | None = None
    insertbefore: str | None = None
    backrefs: bool = False


def _text(line: bytes) -> str:
    return strip_ending(line).decode(*_CODEC)


def _last_match(pattern: re.Pattern[str], texts: list[str]) -> tuple[int, re.Match[str] | None]:
    found, match = -1, None
    for index, text in enumerate(texts):
        hit = pattern.search(text)
        if hit is not None:
            found, match = index, hit
    return found, match


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def line_in_file(source: bytes, spec: LineSpec) -> EditResult:
    """``source`` with ``spec`` applied (see the module docstring).

    Raises:
        EditError: a regexp does not compile, or ``backrefs`` names a group it lacks.
    """
    lines = source.splitlines(keepends=True)
    texts = [_text(line) for line in lines]
    try:
        regexp = re.compile(spec.regexp) if spec.regexp is not None else None
        anchor_source = spec.insertafter or spec.insertbefore
        anchor = (
            re.compile(anchor_source)
            if anchor_source is not None and anchor_source not in ("EOF", "BOF")
            else None
        )
    except re.error as exc:
        raise EditError(f"bad regular expression: {exc}") from exc
    if spec.state == "absent":
        return _absent(source, lines, texts, regexp, spec.line)
    assert spec.line is not None  # the model requires it for present
    return _present(source, lines, texts, regexp, anchor, spec)


def _absent(
    source: bytes,
    lines: list[bytes],
    texts: list[str],
    regexp: re.Pattern[str] | None,
    line: str | None,
) -> EditResult:
    if regexp is not None:
        keep = [raw for raw, text in zip(lines, texts, strict=True) if not regexp.search(text)]
        what = "matching the regexp"
    else:
        keep = [raw for raw, text in zip(lines, texts, strict=True) if text != line]
        what = "equal to the line"
    removed = len(lines) - len(keep)
    if not removed:
        return EditResult(source, False, f"no change: no line {what}")
    return EditResult(b"".join(keep), True, f"removed {_plural(removed, 'line')} {what}")


def _present(
    source: bytes,
    lines: list[bytes],
    texts: list[str],
    regexp: re.Pattern[str] | None,
    anchor: re.Pattern[str] | None,
    spec: LineSpec,
) -> EditResult:
    line = str(spec.line)
    newline = detect_newline(source)
    if regexp is not None:
        index, match = _last_match(regexp, texts)
        if match is not None:
            try:
                wanted = match.expand(line) if spec.backrefs else line
            except (re.error, IndexError) as exc:
                raise EditError(f"backrefs: {exc}") from exc
            if texts[index] == wanted:
                return EditResult(source, False, f"no change: line {index + 1} is already right")
            ending = line_ending(lines[index])
            lines[index] = wanted.encode(*_CODEC) + ending
            return EditResult(b"".join(lines), True, f"replaced line {index + 1}")
        if spec.backrefs:
            return EditResult(source, False, "no change: the regexp matches no line (backrefs)")
    for index, text in enumerate(texts):
        if text == line:
            return EditResult(source, False, f"no change: the line is present at line {index + 1}")
    added = line.encode(*_CODEC) + newline
    if spec.insertbefore == "BOF" or spec.insertafter == "BOF":
        return EditResult(added + source, True, "added the line at the start of the file")
    at = -1
    if anchor is not None:
        at, _ = _last_match(anchor, texts)
    if at == -1 or spec.insertafter == "EOF":
        prefix = newline if lines and not line_ending(lines[-1]) else b""
        where = "at the end of the file" if anchor is None else "at the end (no anchor matched)"
        return EditResult(source + prefix + added, True, f"added the line {where}")
    if spec.insertbefore is not None:
        lines.insert(at, added)
        return EditResult(b"".join(lines), True, f"added the line before line {at + 1}")
    if at == len(lines) - 1 and not line_ending(lines[at]):
        lines[at] += newline
    lines.insert(at + 1, added)
    return EditResult(b"".join(lines), True, f"added the line after line {at + 1}")
