"""deploy.edits.patch: exact, offset-tolerant, idempotent application of a unified diff."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from deploy.edits.patch import PatchAmbiguous, PatchConflict, apply_patch, parse_patch
from deploy.edits.pyinsert import insert_into_class
from deploy.edits.text import unified_diff
from deploy.errors import EditError

from .test_pyinsert import KIMI, methods_of

TEN = b"".join(b"line %d\n" % i for i in range(1, 11))

FIVE_TO_FIVE = """\
--- a/f.conf
+++ b/f.conf
@@ -3,5 +3,5 @@
 line 3
 line 4
-line 5
+line five
 line 6
 line 7
"""

# (id, source, diff, expected result; None = "no change: patch already applied")
CASES: list[tuple[str, bytes, str, bytes | None]] = [
    ("exact", TEN, FIVE_TO_FIVE, TEN.replace(b"line 5\n", b"line five\n")),
    (
        "offset: two lines added above",
        b"new 1\nnew 2\n" + TEN,
        FIVE_TO_FIVE,
        b"new 1\nnew 2\n" + TEN.replace(b"line 5\n", b"line five\n"),
    ),
    (
        "offset: two lines removed above",
        TEN[14:],
        FIVE_TO_FIVE,
        TEN[14:].replace(b"line 5\n", b"line five\n"),
    ),
    (
        "crlf file, lf diff",
        TEN.replace(b"\n", b"\r\n"),
        FIVE_TO_FIVE,
        TEN.replace(b"line 5\n", b"line five\n").replace(b"\n", b"\r\n"),
    ),
    (
        "crlf file, crlf diff",
        TEN.replace(b"\n", b"\r\n"),
        FIVE_TO_FIVE.replace("\n", "\r\n"),
        TEN.replace(b"line 5\n", b"line five\n").replace(b"\n", b"\r\n"),
    ),
    ("already applied", TEN.replace(b"line 5\n", b"line five\n"), FIVE_TO_FIVE, None),
    (
        "already applied, at an offset",
        b"x\n" + TEN.replace(b"line 5\n", b"line five\n"),
        FIVE_TO_FIVE,
        None,
    ),
    (
        "git headers and a commit message are ignored",
        TEN,
        "From 123 Mon Sep 17 00:00:00 2001\nSubject: fix\n\n---\n"
        "diff --git a/f.conf b/f.conf\nindex 0123..4567 100644\n" + FIVE_TO_FIVE + "-- \n2.43.0\n",
        TEN.replace(b"line 5\n", b"line five\n"),
    ),
    (
        "two hunks",
        TEN,
        "@@ -1,2 +1,3 @@\n line 1\n+line 1.5\n line 2\n@@ -9,2 +10,2 @@\n line 9\n-line 10\n+end\n",
        b"line 1\nline 1.5\n" + TEN[7:].replace(b"line 10\n", b"end\n"),
    ),
    (
        "append at the end is anchored there",
        b"a\nb\nc\n",
        "@@ -2,2 +2,3 @@\n b\n c\n+d\n",
        b"a\nb\nc\nd\n",
    ),
    ("append at the end, re-run", b"a\nb\nc\nd\n", "@@ -2,2 +2,3 @@\n b\n c\n+d\n", None),
    (
        "no newline at end: add a line",
        b"a\nb",
        "@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n",
        b"a\nb\nc\n",
    ),
    (
        "no newline at end: remove the newline",
        b"a\nb\n",
        "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n",
        b"a\nb",
    ),
    (
        "no newline at end: re-run",
        b"a\nb\nc\n",
        "@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n",
        None,
    ),
    ("context only: nothing to do", b"a\nb\n", "@@ -1,2 +1,2 @@\n a\n b\n", None),
    (
        "empty context line without its space",
        b"a\n\nb\n",
        "@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n",
        b"a\n\nc\n",
    ),
    ("create a file", b"", "--- /dev/null\n+++ b/new\n@@ -0,0 +1,2 @@\n+x\n+y\n", b"x\ny\n"),
    ("create a file, re-run", b"x\ny\n", "@@ -0,0 +1,2 @@\n+x\n+y\n", None),
    (
        "latin-1 file keeps its bytes",
        b"# coding: latin-1\nx = '\xe9'\ny = 1\n",
        "@@ -2,2 +2,2 @@\n x = '\u00e9'\n-y = 1\n+y = '\u00e8'\n",
        b"# coding: latin-1\nx = '\xe9'\ny = '\xe8'\n",
    ),
    (
        "undecodable bytes in context survive",
        b"\xff\xfe\nb\n",
        "@@ -2 +2 @@\n-b\n+c\n",
        b"\xff\xfe\nc\n",
    ),
]


@pytest.mark.parametrize(
    ("source", "diff", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_apply(source: bytes, diff: str, expected: bytes | None) -> None:
    result = apply_patch(source, diff, path="f.conf")
    if expected is None:
        assert (result.changed, result.content) == (False, source)
        assert result.summary == "no change: patch already applied"
        return
    assert result.changed
    assert result.content == expected
    assert apply_patch(result.content, diff).summary == "no change: patch already applied"


def test_summary_mentions_offsets() -> None:
    assert apply_patch(TEN, FIVE_TO_FIVE).summary == "applied 1 hunk (+1 -1 lines)"
    shifted = apply_patch(b"x\ny\n" + TEN, FIVE_TO_FIVE)
    assert shifted.summary == "applied 1 hunk (+1 -1 lines); hunk 1 at offset +2"


@pytest.mark.parametrize(
    ("source", "diff", "line", "message"),
    [
        (
            TEN.replace(b"line 4\n", b"line four\n"),
            FIVE_TO_FIVE,
            4,
            "patch does not apply to /etc/f.conf: hunk 1 @@ -3,5 +3,5 @@: "
            "line 4: expected 'line 4', found 'line four'",
        ),
        (TEN[:21], FIVE_TO_FIVE, 4, "line 4: expected 'line 4', found end of file"),
        (
            b"a\nb\nc\nX\n",
            "@@ -2,2 +2,3 @@\n b\n c\n+d\n",
            3,
            "line 3: expected 'b', found 'c' (it ends at the end of the file)",
        ),
        (
            b"a\nb",
            "@@ -1,2 +1,3 @@\n a\n b\n+c\n",
            2,
            "line 2: expected a newline at the end, found none",
        ),
    ],
)
def test_conflicts(source: bytes, diff: str, line: int, message: str) -> None:
    with pytest.raises(PatchConflict) as info:
        apply_patch(source, diff, path="/etc/f.conf")
    assert message in str(info.value)
    assert info.value.path == "/etc/f.conf"
    assert info.value.line == line
    assert info.value.hunk.startswith("@@ -")


def test_ambiguous_diff_is_refused() -> None:
    with pytest.raises(PatchAmbiguous, match="more context"):
        apply_patch(b"a\na\nb\n", "@@ -1 +1,2 @@\n+a\n a\n")


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        ("", "no hunks"),
        ("just words\n", "no hunks"),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
            "touches 2 files",
        ),
        (
            "diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"
            "diff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
            "touches 2 files",
        ),
        ("@@ -1,3 +1,3 @@\n a\n-b\n", "truncated"),
        ("@@ -1 +1 @@\n-a\n+b\n+c\n", "more lines than it says"),
        ("@@ -1,2 +1,2 @@\n a\n*b\n", "is not ' ', '-' or '[+]'"),
        ("Binary files a/x and b/x differ\n", "binary"),
    ],
)
def test_malformed(diff: str, message: str) -> None:
    with pytest.raises(EditError, match=message):
        apply_patch(b"a\nb\nc\n", diff)


def test_parse_patch_removed_line_that_looks_like_a_header() -> None:
    (hunk,) = parse_patch("--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n--- not a header\n-+++ nor this\n+\n")
    assert hunk.lines == [("-", "-- not a header"), ("-", "+++ nor this"), ("+", "")]


def test_real_kimi_diff_round_trip(kimi_source: Callable[[str], bytes]) -> None:
    before = kimi_source("0.5.9")
    code = methods_of(
        kimi_source("0.5.10"),
        KIMI,
        ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"],
    )
    patched = insert_into_class(before, KIMI, code).content
    path = "python/sglang/srt/models/kimi_k25.py"
    diff = unified_diff(before, patched, path)
    assert diff.startswith(f"--- a/{path}\n+++ b/{path}\n@@ -772,5 +772,34 @@\n")
    applied = apply_patch(before, diff, path=path)
    assert applied.changed
    assert applied.content == patched
    again = apply_patch(patched, diff, path=path)
    assert (again.changed, again.summary) == (False, "no change: patch already applied")
    # 0.5.10 has the methods elsewhere in the class: neither side of the diff matches
    with pytest.raises(PatchConflict) as info:
        apply_patch(kimi_source("0.5.10"), diff, path=path)
    assert str(info.value) == (
        f"patch does not apply to {path}: hunk 1 @@ -772,5 +772,34 @@: line 867: expected "
        "'        if language_weights:', found '' (it ends at the end of the file)"
    )
