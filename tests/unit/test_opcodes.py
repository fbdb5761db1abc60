"""`deploy.edits.opcodes`: diffs stay correct, and fast on files of many identical lines."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from deploy.edits.opcodes import EXACT_LINES, diff_opcodes
from deploy.edits.patch import apply_patch
from deploy.edits.text import unified_diff

# A small alphabet makes repeated lines (the hard case) common.
LINES = st.lists(st.sampled_from([b"a\n", b"b\n", b"\n", b"c\r\n"]), max_size=40)
# apply_patch writes added lines with the file's own newline, so its round trip is checked on
# files of one newline style.
LF_LINES = st.lists(st.sampled_from([b"a\n", b"b\n", b"\n"]), max_size=40)


def _rebuild(a: list[bytes], b: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for tag, i1, i2, j1, j2 in diff_opcodes(a, b):
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            out += a[i1:i2]
        else:
            out += b[j1:j2]
    return out


@settings(max_examples=300, deadline=None)
@given(LINES, LINES)
def test_opcodes_turn_old_into_new(a: list[bytes], b: list[bytes]) -> None:
    assert _rebuild(a, b) == b


@settings(max_examples=300, deadline=None)
@given(LF_LINES, LF_LINES, st.booleans())
def test_the_diff_applies_to_old_and_gives_new(
    a: list[bytes], b: list[bytes], cut_last_newline: bool
) -> None:
    if cut_last_newline and b:
        b = [*b[:-1], b[-1].rstrip(b"\n") or b"x"]
    old, new = b"".join(a), b"".join(b)
    diff = unified_diff(old, new, "f")
    if old == new:
        assert diff == ""
    else:
        assert apply_patch(old, diff, path="f").content == new


def test_an_insert_into_twenty_thousand_identical_lines_is_planned_at_once() -> None:
    """difflib alone took 38 s here (quadratic in repeated lines); the head and tail are
    matched first, so the result is the one-line hunk at the right place."""
    old = b"x = 1\n" * 20_000
    new = b"x = 1\n" * 10_000 + b"new\n" + b"x = 1\n" * 10_000
    began = time.monotonic()
    diff = unified_diff(old, new, "f")
    assert time.monotonic() - began < 5, "quadratic again (38 s before; ~0.02 s now)"
    assert diff.splitlines()[2] == "@@ -9998,6 +9998,7 @@"
    assert [line for line in diff.splitlines() if line.startswith(("+", "-"))][2:] == ["+new"]


def test_a_large_rewrite_of_repeated_lines_stays_correct() -> None:
    """Beyond EXACT_LINES the junk heuristic bounds the work; the diff still applies."""
    old = b"x\n" * (3 * EXACT_LINES)
    new = (b"x\n" * 5 + b"y\n") * EXACT_LINES
    began = time.monotonic()
    diff = unified_diff(old, new, "f")
    assert time.monotonic() - began < 5
    assert apply_patch(old, diff, path="f").content == new
