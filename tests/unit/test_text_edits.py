"""deploy.edits.text: newline styles, source encodings, append, and diff rendering."""

from __future__ import annotations

import pytest

from deploy.edits.patch import apply_patch
from deploy.edits.text import (
    append_text,
    decode_python,
    detect_newline,
    encode_fragment,
    encode_python,
    python_encoding,
    unified_diff,
)
from deploy.errors import EditError


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", b"\n"),
        (b"one line, no ending", b"\n"),
        (b"a\nb\n", b"\n"),
        (b"a\r\nb\r\n", b"\r\n"),
        (b"a\rb\r", b"\r"),
        (b"a\r\nb\r\nc\n", b"\r\n"),  # dominant
        (b"a\nb\r\n", b"\n"),  # tie: the first one seen
        (b"a\r\nb\n", b"\r\n"),
    ],
)
def test_detect_newline(data: bytes, expected: bytes) -> None:
    assert detect_newline(data) == expected


@pytest.mark.parametrize(
    ("data", "encoding", "text"),
    [
        (b"x = 'caf\xc3\xa9'\n", "utf-8", "x = 'café'\n"),
        (b"\xef\xbb\xbfx = 1\n", "utf-8-sig", "x = 1\n"),
        (
            b"# -*- coding: latin-1 -*-\nx = '\xe9'\n",
            "iso-8859-1",
            "# -*- coding: latin-1 -*-\nx = 'é'\n",
        ),
        (
            b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nx = '\x80'\n",
            "cp1252",
            "#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nx = '€'\n",
        ),
    ],
)
def test_decode_and_encode_round_trip(data: bytes, encoding: str, text: str) -> None:
    assert python_encoding(data) == encoding
    assert decode_python(data) == text
    assert encode_python(decode_python(data), data) == data


def test_fragment_never_gets_a_bom() -> None:
    assert encode_fragment("é", b"\xef\xbb\xbfx = 1\n") == b"\xc3\xa9"
    assert encode_fragment("é", b"# coding: latin-1\n") == b"\xe9"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"x = '\xff'\n", "line 1: not valid utf-8"),
        (b"x = 1\ny = '\xe9'\n", "line 2: not valid utf-8"),
        (b"# coding: no-such-codec\n", "cannot tell the source encoding"),
        (b"\xef\xbb\xbf# coding: latin-1\n", "cannot tell the source encoding"),
    ],
)
def test_decode_python_errors(data: bytes, message: str) -> None:
    with pytest.raises(EditError, match=message):
        decode_python(data)


def test_encode_fragment_refuses_unencodable_text() -> None:
    with pytest.raises(EditError, match="cannot encode"):
        encode_fragment("→", b"# coding: latin-1\n")


@pytest.mark.parametrize(
    ("source", "text", "expected"),
    [
        (b"a\n", "b", b"a\nb\n"),
        (b"a\n", "b\n", b"a\nb\n"),
        (b"a", "b", b"a\nb\n"),  # a newline is added first
        (b"", "b\nc", b"b\nc\n"),
        (b"a\r\n", "b\nc\n", b"a\r\nb\r\nc\r\n"),  # the file's newline style
        (b"a\r\nb\r\n", "x\r\ny", b"a\r\nb\r\nx\r\ny\r\n"),
        (b"a\nb\n", "b", None),  # already ends with it
        (b"a\nb", "b\n", None),  # modulo the trailing newline
        (b"x\r\nb\r\nc\r\n", "b\nc", None),
        (b"ab\n", "b", b"ab\nb\n"),  # must match whole lines
        (b"a\n", "", None),
        (b"a\n", "\n  \n", None),
    ],
)
def test_append_text(source: bytes, text: str, expected: bytes | None) -> None:
    result = append_text(source, text)
    if expected is None:
        assert not result.changed
        assert result.content == source
        assert result.summary.startswith("no change")
    else:
        assert result.changed
        assert result.content == expected
        assert append_text(result.content, text).changed is False


@pytest.mark.parametrize(
    ("source", "text", "line"),
    [
        (b"a\nb\nc\nlater\n", "b\nc", 2),  # someone appended after it: no duplicate
        (b"b\r\nc\r\nlater\r\n", "b\nc\n", 1),  # newline styles need not agree
        (b"b\nc\nd", "b\nc", 1),  # no final newline after the later line
    ],
)
def test_append_text_present_anywhere_is_no_change(source: bytes, text: str, line: int) -> None:
    result = append_text(source, text)
    assert not result.changed
    assert result.content == source
    assert result.summary == f"no change: the file holds that text at line {line}"


@pytest.mark.parametrize(
    ("source", "text"),
    [
        (b"xb\nc\nlater\n", "b\nc"),  # a line that merely ends with the text's first line
        (b"b\nc d\n", "b\nc"),  # nor one that starts with its last
        (b"b\nx\nc\n", "b\nc"),  # consecutive, not scattered
    ],
)
def test_append_text_needs_whole_consecutive_lines(source: bytes, text: str) -> None:
    assert append_text(source, text).changed


def test_append_text_at_end_requires_the_last_lines() -> None:
    source = b"a\nb\nlater\n"
    result = append_text(source, "b", at_end=True)
    assert result.changed
    assert result.content == b"a\nb\nlater\nb\n"
    assert not append_text(result.content, "b", at_end=True).changed
    assert not append_text(b"a\nb", "b\n", at_end=True).changed


def test_append_text_encoding() -> None:
    assert append_text(b"a\n", "é", encoding="latin-1").content == b"a\n\xe9\n"
    with pytest.raises(EditError, match="cannot encode"):
        append_text(b"a\n", "→", encoding="latin-1")


def test_unified_diff_equal_is_empty() -> None:
    assert unified_diff(b"a\n", b"a\n", "f") == ""


def test_unified_diff_format() -> None:
    old = b"".join(b"line %d\n" % i for i in range(1, 11))
    new = old.replace(b"line 5\n", b"line five\n")
    assert unified_diff(old, new, "etc/app.conf") == (
        "--- a/etc/app.conf\n"
        "+++ b/etc/app.conf\n"
        "@@ -2,7 +2,7 @@\n"
        " line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
    )
    assert unified_diff(old, new, "/etc/app.conf").startswith("--- a/etc/app.conf\n")
    assert "@@ -4,3 +4,3 @@" in unified_diff(old, new, "f", context=1)


def test_unified_diff_crlf_shows_lines_without_cr() -> None:
    diff = unified_diff(b"a\r\nb\r\n", b"a\r\nc\r\n", "f")
    assert "\r" not in diff
    assert diff.endswith("@@ -1,2 +1,2 @@\n a\n-b\n+c\n")


def test_unified_diff_line_ending_change_is_a_change() -> None:
    assert unified_diff(b"a\r\n", b"a\n", "f") == "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+a\n"


def test_unified_diff_no_newline_at_end() -> None:
    assert unified_diff(b"a\nb", b"a\nb\nc\n", "f") == (
        "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n"
    )
    assert unified_diff(b"a\n", b"a\nb", "f").endswith("+b\n\\ No newline at end of file\n")


def test_unified_diff_binary() -> None:
    assert unified_diff(b"a\0b", b"a\0c", "x.bin") == "Binary files a/x.bin and b/x.bin differ\n"


def test_unified_diff_non_utf8() -> None:
    latin = b"# coding: latin-1\nx = '\xe9'\n"
    diff = unified_diff(latin, latin + b"y = '\xe8'\n", "m.py")
    assert "+y = 'è'" in diff  # the coding cookie is honoured for display
    garbage = unified_diff(b"\xff\n", b"\xfe\n", "g")
    assert "-\ufffd\n+\ufffd\n" in garbage  # replacement characters, never an exception


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\nd\r\n"),
        (b"a\nb", b"a\nb\nc"),
        (b"a\nb\n", b"a\nb"),
        (b"", b"x\n"),
        (b"x\n", b""),
        (b"# coding: latin-1\nx = '\xe9'\n", b"# coding: latin-1\nx = '\xe8'\n"),
    ],
)
def test_unified_diff_applies_with_apply_patch(old: bytes, new: bytes) -> None:
    diff = unified_diff(old, new, "f")
    assert apply_patch(old, diff).content == new
    assert apply_patch(new, diff).summary == "no change: patch already applied"
