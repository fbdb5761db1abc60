"""Programs that run ON THE HOST, each sent as the text of one ``python3 -I -S -c`` program.

The host has no `deploy` package, so what runs there (the file helper,
`deploy.remote.fileagent`; the process agent, `deploy.remote.agent`) must arrive as one
self-contained program. Kept under ~400 lines a file, such a program is a main module plus
parts it imports: in the main module, the import of a part follows the comment line
`PART_MARKER`. On the workstation (unit tests, mypy) that is an ordinary import; `program`
puts the part's text in its place, so the host runs the same names from one program text,
standard library only. A part must not import `deploy` itself, except its own parts the same
way, and must have no ``if __name__ == "__main__"`` block: under ``-c`` that would run.

The text sent is the code only (`stripped`): docstrings, comments and blank lines are for
the people reading this repository, and the host would receive them on every run — the file
helper travels in the lock's command line, and half of it was prose. On a fresh TCP
connection a burst over the initial window (10 segments, ~14 KB) waits a round trip per
doubling (`bench/window.py`), so those bytes cost round trips on a real link, not only
bandwidth. The code is the same: tests/unit/test_hostprogram.py compares the syntax trees.

Stripping parses and tokenizes each program (~70 ms of CPU for the three), too much for every
run's start-up, so the stripped texts are made once and kept beside this module in
``shipped/NAME.txt`` (`write_shipped`: ``python -m deploy.remote.hostprogram``), each headed
by the sha256 of the source it was made from. `program` checks that digest against the source
it would assemble now (~1 ms) and strips afresh when they differ: an edited helper never
reaches a host as its old text. tests/unit/test_hostprogram.py fails while a kept text is
stale.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE / "shipped"
#: The programs that run on hosts (each kept stripped in `SHIPPED`).
NAMES = ("agent", "fileagent", "helperboot")
_HEADER = "# sha256 of the source: "
#: The comment line that marks the next import as a part to inline.
PART_MARKER = "# host-program: part (deploy.remote.hostprogram)"
_PART = re.compile(
    "^" + re.escape(PART_MARKER) + r"\nfrom deploy\.remote\.(\w+) import (?:\([^)]*\)|[^\n]*)\n",
    re.MULTILINE,
)


@functools.cache
def program(name: str) -> str:
    """What the host runs for ``deploy/remote/<name>.py``: its text with every marked part
    import replaced by the part's own text, then `stripped` (the kept text when it was made
    from this very source)."""
    source = _assembled(name)
    digest = hashlib.sha256(source.encode()).hexdigest()
    try:
        header, _, text = (SHIPPED / f"{name}.txt").read_text().partition("\n")
    except OSError:
        header, text = "", ""
    if header == _HEADER + digest:
        return text
    return stripped(source)


def shipped_text(name: str) -> str:
    """The content of ``shipped/NAME.txt`` for the current source."""
    source = _assembled(name)
    return f"{_HEADER}{hashlib.sha256(source.encode()).hexdigest()}\n{stripped(source)}"


def write_shipped() -> list[Path]:
    """Write every ``shipped/NAME.txt`` that differs from what the source gives; the paths."""
    written = []
    SHIPPED.mkdir(exist_ok=True)
    for name in NAMES:
        path = SHIPPED / f"{name}.txt"
        text = shipped_text(name)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def _assembled(name: str) -> str:
    return _PART.sub(lambda match: _assembled(match.group(1)), (HERE / f"{name}.py").read_text())


def _is_prose(node: ast.stmt) -> bool:
    """A statement that is a bare string: a docstring, or an inlined part's docstring."""
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def stripped(source: str) -> str:
    """``source`` without docstrings (every statement that is a bare string), comments and
    blank lines; a block left empty gets ``pass``. Lines inside multi-line strings are kept
    as they are, and a bare string sharing a line with other code is kept."""
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()  # 0-based line numbers
    replace: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            removable = [s for s in body if _is_prose(s) and _alone(s, lines)]
            for statement in removable:
                drop.update(range(statement.lineno - 1, statement.end_lineno or statement.lineno))
            if removable and len(removable) == len(body):
                first = removable[0]
                indent = lines[first.lineno - 1][: first.col_offset]
                replace[first.lineno - 1] = f"{indent}pass\n"
    kept: set[int] = set()  # inside a multi-line string: never touched
    cut: dict[int, int] = {}  # line -> column where a trailing comment starts
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        (row, col), (end_row, _) = token.start, token.end
        if end_row > row:
            kept.update(range(row, end_row))  # 0-based: the lines after the first
        if token.type == tokenize.COMMENT:
            if lines[row - 1][:col].strip():
                cut[row - 1] = col
            else:
                drop.add(row - 1)
    out = []
    for index, line in enumerate(lines):
        if index in replace:
            out.append(replace[index])
        elif index in drop:
            continue
        elif index in kept:
            out.append(line)
        elif not line.strip():
            continue
        elif index in cut:
            out.append(line[: cut[index]].rstrip() + "\n")
        else:
            out.append(line)
    return "".join(out)


def _alone(statement: ast.stmt, lines: list[str]) -> bool:
    """Whether ``statement`` has its lines to itself (nothing before it or after it)."""
    end_line, end_col = (statement.end_lineno or statement.lineno), statement.end_col_offset
    before = lines[statement.lineno - 1][: statement.col_offset]
    after = lines[end_line - 1][end_col:] if end_col is not None else ""
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


if __name__ == "__main__":
    for changed in write_shipped():
        print(f"wrote {changed.relative_to(HERE.parents[1])}")
