"""`stripped`: a Python program's text without its prose — the same code in fewer bytes.

The host programs (`deploy.remote.hostprogram`) are sent on every run; half of their text was
docstrings and comments, which the host never needs. This removes every statement that is a
bare string (docstrings, an inlined part's docstring), every comment and every blank line,
and puts ``pass`` in a block left empty. It is a transformation of text, not a re-rendering
of the syntax tree, so everything else stays byte for byte as written.

It is conservative where text and syntax could disagree, and checks itself:

- lines are split as Python's tokenizer splits them (``\\n``, ``\\r\\n``, ``\\r``; not the
  other characters `str.splitlines` breaks at, which would shift every line after them);
- ``ast`` column offsets count UTF-8 bytes, so they are applied to the line's bytes;
- a line inside a multi-line string, or following a line that ends in a backslash
  continuation, is kept as it is;
- a bare string is removed only if it has its lines to itself (no other statement before or
  after it on them), and none of a block's are if a kept one would become its docstring;
- the result must parse to the same tree as the input without the removed strings; if it
  does not, the input is returned unchanged (correct, only larger).
"""

from __future__ import annotations

import ast
import io
import tokenize

_BODIES = ("body", "orelse", "finalbody")


def stripped(source: str) -> str:
    """``source`` without docstrings, comments and blank lines (see the module's rules)."""
    try:
        tree = ast.parse(source)
        result = _strip(source, tree)
        if ast.dump(ast.parse(result)) == ast.dump(_without(tree, _removable(tree, source))):
            return result
    except (SyntaxError, ValueError):
        pass
    return source


def _lines(source: str) -> list[str]:
    """The lines as the tokenizer and ``ast`` number them, ends kept."""
    return io.StringIO(source, newline="").readlines()


def _is_prose(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _removable(tree: ast.AST, source: str) -> set[int]:
    """``id`` of every bare-string statement to remove."""
    lines = _lines(source)
    found: set[int] = set()
    for node in ast.walk(tree):
        for field in _BODIES:
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            gone = [s for s in body if _is_prose(s) and _alone(s, lines)]
            left = [s for s in body if s not in gone]
            if left and left[0] is not body[0] and _is_prose(left[0]):
                continue  # the kept string would become the block's docstring
            found.update(id(s) for s in gone)
    return found


def _without(tree: ast.AST, removed: set[int]) -> ast.AST:
    """``tree`` (modified in place) without the ``removed`` statements; ``pass`` if empty."""
    for node in ast.walk(tree):
        for field in _BODIES:
            body = getattr(node, field, None)
            if isinstance(body, list) and any(id(s) in removed for s in body):
                setattr(node, field, [s for s in body if id(s) not in removed] or [ast.Pass()])
    return tree


def _alone(statement: ast.stmt, lines: list[str]) -> bool:
    """Whether ``statement`` has its lines to itself (only blanks or a comment besides)."""
    end_line = statement.end_lineno or statement.lineno
    end_col = statement.end_col_offset or 0
    before = lines[statement.lineno - 1].encode()[: statement.col_offset]
    after = lines[end_line - 1].encode()[end_col:].strip()
    return not before.strip() and (not after or after.startswith(b"#"))


def _strip(source: str, tree: ast.AST) -> str:
    lines = _lines(source)
    drop: set[int] = set()  # 0-based line numbers
    replace: dict[int, str] = {}
    removed = _removable(tree, source)
    for node in ast.walk(tree):
        for field in _BODIES:
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            gone = [s for s in body if id(s) in removed]
            for statement in gone:
                drop.update(range(statement.lineno - 1, statement.end_lineno or statement.lineno))
            if gone and len(gone) == len(body):
                first = gone[0]
                indent = lines[first.lineno - 1].encode()[: first.col_offset].decode()
                replace[first.lineno - 1] = f"{indent}pass\n"
    inside: set[int] = set()  # inside a multi-line string
    cut: dict[int, int] = {}  # line -> character column where a trailing comment starts
    for token in tokenize.generate_tokens(io.StringIO(source, newline="").readline):
        (row, col), (end_row, _) = token.start, token.end
        if end_row > row:
            inside.update(range(row, end_row))  # 0-based: the lines after the first
        if token.type == tokenize.COMMENT:
            if lines[row - 1][:col].strip():
                cut[row - 1] = col
            else:
                drop.add(row - 1)
    # A line after a backslash continuation is part of the line before: never touched.
    continued = {i + 1 for i, line in enumerate(lines) if line.rstrip("\r\n").endswith("\\")}
    out = []
    for index, line in enumerate(lines):
        if index in continued:
            out.append(line)
        elif index in replace:
            out.append(replace[index])
        elif index in drop:
            continue
        elif index in inside:
            out.append(line)
        elif not line.strip():
            continue
        elif index in cut:
            out.append(line[: cut[index]].rstrip() + "\n")
        else:
            out.append(line)
    return "".join(out)
