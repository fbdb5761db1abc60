"""Byte-exact text helpers shared by the edits: newline style, source encodings, append, diff.

Every edit works on the bytes fetched from the host and must leave the bytes it does not mean
to change exactly as they were: a CRLF file stays CRLF, a latin-1 file with a coding cookie
stays latin-1, a file without a final newline keeps lacking one. So lines are split on bytes
(``bytes.splitlines`` knows exactly the three line endings Python's tokenizer knows: CRLF, LF,
CR), only the text an edit adds is ever encoded, and diffs are rendered for people, never
round-tripped through a decoder that could lose bytes.

Nothing here performs I/O.
"""

from __future__ import annotations

import io
import tokenize

from deploy.edits.opcodes import diff_opcodes, grouped
from deploy.edits.result import EditResult
from deploy.errors import EditError
from deploy.memo import once

_ENDINGS = (b"\r\n", b"\n", b"\r")


def detect_newline(data: bytes) -> bytes:
    """The file's line ending: the most frequent of CRLF, LF and CR; on a tie, the first seen.

    A file with no line ending at all (empty, or a single line) gets ``b"\\n"``: whatever an edit
    adds to it then follows the Unix convention, which is what the hosts run.
    """
    counts = {ending: 0 for ending in _ENDINGS}
    first: dict[bytes, int] = {}
    for index, line in enumerate(data.splitlines(keepends=True)):
        ending = line_ending(line)
        if ending:
            counts[ending] += 1
            first.setdefault(ending, index)
    if not first:
        return b"\n"
    return max(first, key=lambda ending: (counts[ending], -first[ending]))


def line_ending(line: bytes) -> bytes:
    """The ending of one line from ``splitlines(keepends=True)``: CRLF, LF, CR or ``b""``."""
    for ending in _ENDINGS:
        if line.endswith(ending):
            return ending
    return b""


def strip_ending(line: bytes) -> bytes:
    """``line`` without its line ending (exactly one CRLF, LF or CR is removed)."""
    return line[: len(line) - len(line_ending(line))]


def python_encoding(data: bytes) -> str:
    """The codec Python itself would use for this source: BOM, else PEP 263 cookie, else UTF-8.

    Returns ``"utf-8-sig"`` for a file that starts with a UTF-8 BOM.

    Raises:
        EditError: the cookie names an unknown codec, contradicts the BOM, or names a codec
            that is not ASCII-compatible (line splitting on bytes would then be wrong).
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if str(exc).startswith("invalid or missing encoding declaration"):
            return "utf-8"  # no cookie, and not UTF-8 in the first lines: decoding will say where
        raise EditError(f"cannot tell the source encoding: {exc}") from exc
    plain = "utf-8" if encoding == "utf-8-sig" else encoding
    if "\r\n #".encode(plain, errors="replace") != b"\r\n #":
        raise EditError(f"source encoding {encoding} is not ASCII-compatible; cannot edit it")
    return encoding


def decode_python(data: bytes) -> str:
    """The text of a Python source, decoded the way the interpreter decodes it (BOM removed).

    Raises:
        EditError: unknown encoding, or bytes that are invalid in it (with the line number).
    """
    encoding = python_encoding(data)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise EditError(f"line {line}: not valid {encoding}: {exc.reason}") from exc


def encode_python(text: str, like: bytes) -> bytes:
    """Encode a whole file's ``text`` the way ``like`` (the original bytes) is encoded.

    ``encode_python(decode_python(data), data) == data`` for UTF-8 (with or without BOM) and
    single-byte codecs such as latin-1, so a decode/encode round trip changes nothing.

    Raises:
        EditError: ``text`` holds characters that the file's encoding cannot represent.
    """
    return _encode(text, python_encoding(like), "file")


def encode_fragment(text: str, like: bytes) -> bytes:
    """Encode text that will be spliced *into* ``like``: its encoding, but never a BOM.

    Raises:
        EditError: ``text`` holds characters that the file's encoding cannot represent.
    """
    encoding = python_encoding(like)
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    return _encode(text, encoding, "inserted text")


def _encode(text: str, encoding: str, what: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise EditError(f"{what} contains {bad!r}, which {encoding} cannot encode") from exc


def normalize_newlines(text: str, newline: str = "\n") -> str:
    """``text`` with every CRLF, CR and LF replaced by ``newline``."""
    unix = text.replace("\r\n", "\n").replace("\r", "\n")
    return unix if newline == "\n" else unix.replace("\n", newline)


def append_text(
    source: bytes, text: str, *, encoding: str = "utf-8", at_end: bool = False
) -> EditResult:
    """Append ``text`` to the end of ``source`` unless the file already holds it, like
    Ansible's ``lineinfile``/``blockinfile``.

    The text gets the file's newline style and always ends with one; if the file does not end
    with a newline, one is added first so the text starts on its own line. Idempotent: when the
    file already holds exactly that text as whole consecutive lines, anywhere, nothing changes
    (someone may have appended more lines after it since; appending again would duplicate
    it). With ``at_end`` the text must be the file's last lines (with or without the final
    newline), else it is appended. Empty or whitespace-only text is no change either.

    This is the right tool for line-oriented files (configs, requirements); for Python code that
    belongs inside a class use ``insert_into_class``: appending methods puts them at module level.

    Raises:
        EditError: ``text`` cannot be encoded in ``encoding``.
    """
    body = normalize_newlines(text).rstrip("\n")
    if not body.strip():
        return EditResult(source, False, "no change: nothing to append")
    newline = detect_newline(source)
    block = _encode(body.replace("\n", newline.decode("ascii")), encoding, "appended text")
    tail = source[: len(source) - len(line_ending(source))] if source else source
    if tail.endswith(block):
        before = tail[: len(tail) - len(block)]
        if not before or before.endswith((b"\n", b"\r")):
            return EditResult(source, False, "no change: the file already ends with that text")
    found = None if at_end else find_lines(source, _encode(body, encoding, "appended text"))
    if found is not None:
        return EditResult(source, False, f"no change: the file holds that text at line {found}")
    prefix = newline if source and not line_ending(source) else b""
    added = block.count(newline) + 1
    return EditResult(
        source + prefix + block + newline,
        True,
        f"appended {added} line{'s' if added != 1 else ''} at the end of the file",
    )


def find_lines(source: bytes, block: bytes) -> int | None:
    """The 1-based line at which ``block``'s lines appear in ``source`` as whole consecutive
    lines, whatever newline style either uses; None if they do not."""
    wanted = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    lines = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it starts no new one
    first, count = wanted[0], len(wanted)
    for start in range(len(lines) - count + 1):
        if lines[start] == first and lines[start : start + count] == wanted:
            return start + 1
    return None


def diff_encoding(data: bytes) -> str:
    """The codec that shows ``data`` best in a diff: UTF-8 if valid, else its PEP 263 codec.

    Falls back to UTF-8 (the caller picks the error handler) when neither decodes cleanly.
    """
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return "utf-8"
    try:
        encoding = python_encoding(data)
        data.decode(encoding)
    except (EditError, UnicodeDecodeError, LookupError):
        return "utf-8"
    return encoding


def unified_diff(old: bytes, new: bytes, path: str, context: int = 3) -> str:
    """A ``diff -u`` rendering of ``old`` -> ``new`` for ``--check``/``--diff`` output.

    Lines are compared *with* their endings (a CRLF -> LF change is a change) but shown without
    them, so a CRLF file reads like any other and the result applies with ``apply_patch``. A last
    line without a newline gets GNU diff's ``\\ No newline at end of file`` marker. Text is
    decoded for display only (UTF-8, else the file's coding cookie, else UTF-8 with
    replacement characters). Content with NUL bytes is reported as
    ``Binary files a/PATH and b/PATH differ``. Equal inputs give ``""``. The hunks are computed
    once per distinct input across the run's hosts (`deploy.memo`), whatever the path on each
    host: difflib is the costliest step of a plan.
    """
    if old == new:
        return ""
    name = path.lstrip("/")
    if b"\0" in old or b"\0" in new:
        return f"Binary files a/{name} and b/{name} differ\n"
    return f"--- a/{name}\n+++ b/{name}\n" + _hunks(old, new, context)


@once
def _hunks(old: bytes, new: bytes, context: int) -> str:
    """The hunks of `unified_diff` (everything after the two header lines), one per line."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    a_text = _display_lines(old, a)
    b_text = _display_lines(new, b)
    out: list[str] = []
    for group in grouped(diff_opcodes(a, b), context):
        first, last = group[0], group[-1]
        old_range = _hunk_range(first[1], last[2])
        new_range = _hunk_range(first[3], last[4])
        out.append(f"@@ -{old_range} +{new_range} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for i in range(i1, i2):
                    out.append(" " + a_text[i])
                    _mark_no_newline(out, a, i)
                continue
            for i in range(i1, i2):
                out.append("-" + a_text[i])
                _mark_no_newline(out, a, i)
            for j in range(j1, j2):
                out.append("+" + b_text[j])
                _mark_no_newline(out, b, j)
    return "".join(line + "\n" for line in out)


def _display_lines(data: bytes, lines: list[bytes]) -> list[str]:
    encoding = diff_encoding(data)
    return [strip_ending(line).decode(encoding, errors="replace") for line in lines]


def _mark_no_newline(out: list[str], lines: list[bytes], index: int) -> None:
    if index == len(lines) - 1 and not line_ending(lines[index]):
        out.append("\\ No newline at end of file")


def _hunk_range(start: int, stop: int) -> str:
    """A unified-diff range, as GNU diff writes it (an empty range names the line before)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    if length == 0:
        return f"{start},0"
    return f"{start + 1},{length}"
