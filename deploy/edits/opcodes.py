"""Line matching for diffs that stays fast on files of many identical lines.

``difflib.SequenceMatcher`` without its junk heuristic is quadratic in repeated lines: a plan
on a file of 20,000 identical lines took 38 s (measured; docs/reliability.md). Two steps keep
it near linear without changing what a diff says about an ordinary edit:

1. The common head and tail are matched first, as GNU diff does: deploy's edits (an insert, a
   patch, an append) touch a small region, so only that region is left to compare.
2. What is left is matched exactly while small; beyond `EXACT_LINES` lines, difflib's own
   junk heuristic (lines that make up more than 1 % of the text are not used as anchors) bounds
   the work. The diff may then be less than minimal, never wrong: applying it still turns the
   old lines into the new ones.

Pure: lists of lines in, difflib opcodes out.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Literal

Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]

#: Past this many lines on the new side of the differing region, difflib's autojunk is used
#: (exact matching of 1,000 identical lines costs ~0.1 s, of 4,000 ~1.5 s).
EXACT_LINES = 1000


def diff_opcodes(a: Sequence[bytes], b: Sequence[bytes]) -> list[Opcode]:
    """Opcodes turning ``a`` into ``b`` (difflib's format), the common head and tail first."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    if a_mid or b_mid:
        matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=len(b_mid) > EXACT_LINES)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return _merge_equal(codes)


def _merge_equal(codes: list[Opcode]) -> list[Opcode]:
    """Join adjacent ``equal`` runs (the head or tail next to an equal run of the middle)."""
    out: list[Opcode] = []
    for code in codes:
        if out and code[0] == "equal" and out[-1][0] == "equal":
            tag, i1, _, j1, _ = out[-1]
            out[-1] = (tag, i1, code[2], j1, code[4])
        else:
            out.append(code)
    return out


def grouped(
    codes: list[Opcode], context: int = 3
) -> Iterable[list[tuple[str, int, int, int, int]]]:
    """The hunks of a unified diff with ``context`` lines around each change.

    The grouping ``difflib.SequenceMatcher.get_grouped_opcodes`` does, applied to our opcodes.
    """
    matcher = _Given(codes)
    return matcher.get_grouped_opcodes(context)


class _Given(difflib.SequenceMatcher[bytes]):
    """A matcher whose opcodes are already computed (difflib groups any opcode list alike)."""

    def __init__(self, codes: list[Opcode]) -> None:
        super().__init__(None, [], [])
        self._codes = codes

    def get_opcodes(self) -> list[Opcode]:
        return list(self._codes)
