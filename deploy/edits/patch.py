"""Apply a unified diff to one file's bytes, exactly or not at all, and know when it is done.

The rules are GNU ``patch`` at fuzz 0, made idempotent:

* every context and removed line must match exactly (lines are compared without their line
  endings, so a diff made on an LF checkout applies to a CRLF file, which stays CRLF);
* a hunk may sit at an offset from the line its header states: the nearest exact match wins,
  searched after the previous hunk. Offsets carry over to later hunks, as in ``patch``;
* a hunk with less context on one side than the other was cut short by the start or end of the
  file (that is how ``diff`` writes them), so it must match there: this is what stops a hunk
  that appends after the last lines from applying twice;
* when the diff does not apply forward but applies in reverse, the file already has it:
  ``changed=False``, "no change: patch already applied". The reverse is tried first at the
  exact stated lines: with a short or repetitive context (or none, ``diff -U0``) a patched file
  may also accept the diff forward a few lines away, and applying twice is the failure this
  tool exists to prevent. If both sides match at the stated lines, `PatchAmbiguous` asks for
  more context rather than guess. (Hunks that only delete, without context, stay as ambiguous
  as they are for any tool: their reverse matches anywhere.);
* otherwise `PatchConflict` names the path, the hunk header and the first line that differs.

Lines the diff does not touch keep their exact bytes, endings included; added lines get the
file's newline style and encoding. A diff that touches more than one file is refused: one step
edits one file, and a multi-file diff would be applied to the wrong one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deploy.edits.result import EditResult
from deploy.edits.text import detect_newline, diff_encoding, line_ending, strip_ending
from deploy.errors import EditError

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\"


class PatchConflict(EditError):
    """A hunk matches the file neither forward nor in reverse: someone changed those lines."""

    def __init__(self, message: str, *, path: str, hunk: str, line: int) -> None:
        self.path = path
        self.hunk = hunk
        self.line = line
        super().__init__(message)


class PatchAmbiguous(EditError):
    """The file matches both sides of the diff at the stated lines: too little context."""


@dataclass
class Hunk:
    """One ``@@`` section: the old and new line ranges and the tagged lines between them."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[tuple[str, str]] = field(default_factory=list)
    old_no_eol: bool = False
    new_no_eol: bool = False

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@"

    def old(self) -> list[str]:
        return [text for tag, text in self.lines if tag in " -"]

    def new(self) -> list[str]:
        return [text for tag, text in self.lines if tag in " +"]

    def reversed(self) -> Hunk:
        swap = {"-": "+", "+": "-", " ": " "}
        return Hunk(
            self.new_start,
            self.new_len,
            self.old_start,
            self.old_len,
            [(swap[tag], text) for tag, text in self.lines],
            self.new_no_eol,
            self.old_no_eol,
        )

    def context(self) -> tuple[int, int]:
        """How many context lines open and close the hunk (leading, trailing)."""
        tags = [tag for tag, _ in self.lines]
        lead = next((i for i, tag in enumerate(tags) if tag != " "), len(tags))
        trail = next((i for i, tag in enumerate(reversed(tags)) if tag != " "), len(tags))
        return lead, trail


def parse_patch(diff: str) -> list[Hunk]:
    """The hunks of a single-file unified diff; headers and other chatter are skipped.

    ``diff``/``index``/``---``/``+++`` lines and text outside hunks (a commit message, a mail
    signature) are ignored. A line of a hunk may end in CR (a diff of a CRLF file): it is dropped.

    Raises:
        EditError: more than one file, a binary diff, a truncated or malformed hunk, no hunks.
    """
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    hunks: list[Hunk] = []
    old_headers = diff_headers = 0
    index = 0
    while index < len(lines):
        line = lines[index].removesuffix("\r")
        match = _HUNK_HEADER.match(line)
        if match:
            hunk, index = _read_hunk(lines, index, match)
            hunks.append(hunk)
            after = lines[index].removesuffix("\r") if index < len(lines) else ""
            if after[:1] in ("+", "-", " ") and not after.startswith(("--- ", "+++ ", "-- ")):
                raise EditError(f"hunk {hunk.header} has more lines than it says")
            continue
        if line.startswith("--- "):
            old_headers += 1
        elif line.startswith("diff "):
            diff_headers += 1
        elif line.startswith(("Binary files ", "GIT binary patch")):
            raise EditError("the diff is a binary diff; it cannot be applied as text")
        index += 1
    if max(old_headers, diff_headers) > 1:
        raise EditError(
            f"the diff touches {max(old_headers, diff_headers)} files; give one diff per file"
        )
    if not hunks:
        raise EditError("the diff has no hunks (no line starting with '@@ -')")
    return hunks


def _read_hunk(lines: list[str], index: int, match: re.Match[str]) -> tuple[Hunk, int]:
    old_start, old_len, new_start, new_len = (
        int(value) if value is not None else 1 for value in match.groups()
    )
    hunk = Hunk(old_start, old_len, new_start, new_len)
    old_left, new_left = old_len, new_len
    where = index + 1
    index += 1
    while old_left or new_left or (index < len(lines) and lines[index].startswith(_NO_NEWLINE)):
        if index >= len(lines):
            raise EditError(f"hunk {hunk.header} (diff line {where}) is truncated")
        line = lines[index].removesuffix("\r")
        index += 1
        if line.startswith(_NO_NEWLINE):
            if not hunk.lines:
                raise EditError(f"hunk {hunk.header}: '\\ No newline' before any line")
            tag = hunk.lines[-1][0]
            hunk.old_no_eol |= tag in " -"
            hunk.new_no_eol |= tag in " +"
            continue
        tag, text = (line[0], line[1:]) if line else (" ", "")
        if tag not in " -+":
            raise EditError(
                f"hunk {hunk.header}: diff line {index} is not ' ', '-' or '+': {line!r}"
            )
        old_left -= tag in " -"
        new_left -= tag in " +"
        if old_left < 0 or new_left < 0:
            raise EditError(f"hunk {hunk.header} (diff line {where}) has more lines than it says")
        hunk.lines.append((tag, text))
    return hunk, index


class _Mismatch(Exception):
    """Internal: hunk ``number`` does not match; ``line`` is 1-based in the original file."""

    def __init__(self, number: int, hunk: Hunk, line: int, detail: str) -> None:
        super().__init__(detail)
        self.number, self.hunk, self.line, self.detail = number, hunk, line, detail


def apply_patch(source: bytes, diff: str, *, path: str = "<file>") -> EditResult:
    """Apply the unified ``diff`` to ``source`` (see the module docstring for the rules).

    Raises:
        EditError: the diff is malformed, binary, for several files, or adds text the file's
            encoding cannot hold.
        PatchConflict: a hunk applies neither forward nor in reverse.
        PatchAmbiguous: both the old and the new side match at the stated lines.
    """
    hunks = parse_patch(diff)
    reverse = [hunk.reversed() for hunk in hunks]
    already = EditResult(source, False, "no change: patch already applied")
    # A side with no lines matches anywhere, so only a hunk with lines there can tell.
    if all(hunk.new() for hunk in hunks) and _applies(source, reverse, exact=True):
        changes = any(hunk.old() != hunk.new() for hunk in hunks)
        if changes and all(hunk.old() for hunk in hunks) and _applies(source, hunks, exact=True):
            raise PatchAmbiguous(
                f"the diff for {path} is ambiguous: it applies at the stated lines and also "
                "looks already applied there; make it again with more context (diff -U5)"
            )
        return already
    try:
        lines, offsets = _apply(source, hunks)
    except _Mismatch as forward:
        if _applies(source, reverse):
            return already
        raise PatchConflict(
            f"patch does not apply to {path}: hunk {forward.number} {forward.hunk.header}: "
            f"{forward.detail}",
            path=path,
            hunk=forward.hunk.header,
            line=forward.line,
        ) from None
    content = b"".join(lines)
    if content == source:
        return EditResult(source, False, "no change: the patch changes nothing")
    added = sum(tag == "+" for hunk in hunks for tag, _ in hunk.lines)
    removed = sum(tag == "-" for hunk in hunks for tag, _ in hunk.lines)
    plural = "s" if len(hunks) != 1 else ""
    summary = f"applied {len(hunks)} hunk{plural} (+{added} -{removed} lines)"
    moved = [f"hunk {n} at offset {off:+d}" for n, off in enumerate(offsets, 1) if off]
    if moved:
        summary += "; " + ", ".join(moved)
    return EditResult(content, True, summary)


def _applies(source: bytes, hunks: list[Hunk], *, exact: bool = False) -> bool:
    try:
        _apply(source, hunks, exact=exact)
    except _Mismatch:
        return False
    return True


def _apply(
    source: bytes, hunks: list[Hunk], *, exact: bool = False
) -> tuple[list[bytes], list[int]]:
    """Apply ``hunks`` in order: the new lines and each hunk's offset, or raise `_Mismatch`.

    ``exact`` allows no offset: every hunk must match at the line its header states.
    """
    encoding = diff_encoding(source)
    newline = detect_newline(source)
    lines = source.splitlines(keepends=True)
    texts = [strip_ending(line).decode(encoding, errors="surrogateescape") for line in lines]
    shift = 0  # lines added minus removed so far, plus the last hunk's offset
    delta = 0  # lines added minus removed so far: maps current positions to original ones
    lower = 0  # hunks apply in order: no match before the end of the previous one
    offsets: list[int] = []
    for number, hunk in enumerate(hunks, 1):
        old, new = hunk.old(), hunk.new()
        expected = (hunk.old_start - 1 if hunk.old_len else hunk.old_start) + shift
        at = _locate(hunk, old, lines, texts, expected, lower)
        if exact and at != expected:
            at = None
        if at is None:
            line, detail = _first_difference(hunk, old, lines, texts, expected, lower)
            raise _Mismatch(number, hunk, line - delta, detail)
        offsets.append(at - expected)
        replacement = _new_lines(hunk, new, lines[at : at + len(old)], encoding, newline)
        lines[at : at + len(old)] = replacement
        texts[at : at + len(old)] = new
        shift += at - expected + len(new) - len(old)
        delta += len(new) - len(old)
        lower = at + len(new)
    return lines, offsets


def _anchors(hunk: Hunk, old: list[str]) -> tuple[bool, bool]:
    """Whether the hunk must start at line 1, and whether it must end at the end of the file.

    ``diff`` writes the same number of context lines on both sides unless the start or the end
    of the file cut them short; a ``\\ No newline`` marker on the old side pins the end too.
    """
    lead, trail = hunk.context()
    return lead < trail, bool(old) and (trail < lead or hunk.old_no_eol)


def _locate(
    hunk: Hunk, old: list[str], lines: list[bytes], texts: list[str], expected: int, lower: int
) -> int | None:
    """The matching position nearest ``expected`` (0-based), or None."""
    at_start, at_end = _anchors(hunk, old)
    last = len(texts) - len(old)
    if at_start or at_end:
        candidates = [0 if at_start else last]
    else:
        candidates = [expected]
        for distance in range(1, max(expected - lower, last - expected) + 1):
            candidates += [expected - distance, expected + distance]
    for at in candidates:
        if at_end and at != last:
            continue
        if lower <= at <= last and _matches(hunk, old, lines, texts, at):
            return at
    return None


def _matches(hunk: Hunk, old: list[str], lines: list[bytes], texts: list[str], at: int) -> bool:
    if texts[at : at + len(old)] != old:
        return False
    if not old:
        return True
    at_end = at + len(old) == len(lines)
    last_has_newline = bool(line_ending(lines[at + len(old) - 1]))
    return hunk.old_no_eol == (at_end and not last_has_newline)


def _first_difference(
    hunk: Hunk, old: list[str], lines: list[bytes], texts: list[str], expected: int, lower: int
) -> tuple[int, str]:
    """Where and how the hunk's old lines differ from the file where it had to match."""
    at_start, at_end = _anchors(hunk, old)
    at = 0 if at_start else max(len(texts) - len(old), 0) if at_end else max(expected, lower)
    pinned = " (it ends at the end of the file)" if at_end else ""
    pinned = " (it starts at the start of the file)" if at_start else pinned
    for k, want in enumerate(old):
        if at + k >= len(texts):
            return at + k + 1, f"line {at + k + 1}: expected {want!r}, found end of file"
        if texts[at + k] != want:
            found = texts[at + k]
            return at + k + 1, f"line {at + k + 1}: expected {want!r}, found {found!r}{pinned}"
    end = at + len(old)
    if not old:
        return at + 1, f"line {at + 1}: past the end of the file ({len(texts)} lines)"
    if at_end and end < len(texts):
        return end + 1, f"line {end + 1}: expected the end of the file, found {texts[end]!r}"
    if hunk.old_no_eol:
        return end, f"line {end}: expected no newline at the end of the file, found one"
    if not line_ending(lines[end - 1]):
        return end, f"line {end}: expected a newline at the end, found none"
    return at + 1, f"line {at + 1}: the lines match only before the previous hunk ended"


def _new_lines(
    hunk: Hunk, new: list[str], matched: list[bytes], encoding: str, newline: bytes
) -> list[bytes]:
    """The bytes for the hunk's new side: context lines keep their bytes, added lines are made."""
    kept = iter(matched)
    out: list[bytes] = []
    for tag, text in hunk.lines:
        if tag == "-":
            next(kept)
        elif tag == " ":
            out.append(next(kept))
        else:
            try:
                out.append(text.encode(encoding, errors="surrogateescape") + newline)
            except UnicodeEncodeError as exc:
                raise EditError(f"the diff adds {text!r}, which {encoding} cannot encode") from exc
    if hunk.new_no_eol and out:
        out[-1] = strip_ending(out[-1])
    return out
