"""The code `deploy.edits.pyinsert` inserts: dedented, checked, re-indented for the class.

Split from `deploy.edits.pyinsert` by concept: that module finds where in the file the code
goes; this one turns the operator's code (written at any indentation, with tabs or spaces) into
one `Item` per top-level definition, each as text lines at the class body's own indentation.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from typing import NamedTuple

from deploy.checks.parsing import parse
from deploy.checks.python_ast import statement_names
from deploy.edits.text import normalize_newlines
from deploy.errors import EditError

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class Item(NamedTuple):
    """One top-level definition of the code to insert, as re-indented text lines."""

    name: str
    node: ast.stmt
    text: list[str]


def code_items(code: str, body_indent: str, indent_unit: str) -> list[Item]:
    """Dedent, check and re-indent ``code``; one `Item` per top-level definition.

    Each item's text runs from the end of the previous item, so comments between definitions
    travel with the definition below them; trailing comments go with the last one.
    """
    raw = [_expand_leading_tabs(line) for line in normalize_newlines(code).split("\n")]
    dedented = textwrap.dedent("\n".join(raw))
    try:
        if not parse(dedented).body:
            raise EditError("the code to insert is empty (no statements)")
    except SyntaxError as exc:
        raise EditError(f"the code to insert does not parse: line {exc.lineno}: {exc.msg}") from exc
    text = _reindent(dedented.strip("\n").split("\n"), body_indent, indent_unit, dedented)
    try:
        wrapper = parse("class _Inserted:\n" + "\n".join(text) + "\n")
    except SyntaxError as exc:
        raise EditError(f"the re-indented code does not parse: {exc.msg}; this is a bug") from exc
    body = wrapper.body[0].body if isinstance(wrapper.body[0], ast.ClassDef) else []
    items: list[Item] = []
    start = 0
    for index, stmt in enumerate(body):
        names = statement_names(stmt)
        single = isinstance(stmt, (*_DEFS, ast.AnnAssign)) or (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        )
        if not single or len(names) != 1:
            raise EditError(
                "the code to insert may hold only definitions (def, class, or an assignment to "
                f"one name), so that a re-run can find them; line {stmt.lineno - 1} is not one"
            )
        if any(item.name == names[0] for item in items):
            raise EditError(f"the code to insert defines {names[0]} twice")
        # wrapper line n is text[n - 2]; the last item also takes any trailing comments
        end = len(text) if index == len(body) - 1 else (stmt.end_lineno or stmt.lineno) - 1
        segment = text[start:end]
        while segment and not segment[0].strip():
            segment.pop(0)
        while segment and not segment[-1].strip():
            segment.pop()
        items.append(Item(names[0], stmt, segment))
        start = end
    return items


def _expand_leading_tabs(line: str) -> str:
    rest = line.lstrip(" \t")
    return line[: len(line) - len(rest)].expandtabs(8) + rest


def _code_unit(code: str) -> int:
    """The code's own indentation step: the smallest INDENT the tokenizer sees (default 4)."""
    widths: list[int] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.INDENT:
                widths.append(len(token.string))
    except (tokenize.TokenError, SyntaxError):
        pass
    return min(widths, default=4) or 4


def _reindent(lines: list[str], body_indent: str, indent_unit: str, code: str) -> list[str]:
    """Put dedented code at the class body's indentation, in the file's indentation unit.

    Each step of the code's own indentation (its smallest INDENT) becomes one unit of the
    file's (a tab, or the number of spaces the class body is indented by), so a tab-indented
    class gets tabs and a 2-space file gets 2 spaces. Blank lines become empty.
    """
    step = _code_unit(code)
    out: list[str] = []
    for line in lines:
        rest = line.lstrip(" ")
        if not rest.strip():
            out.append("")
            continue
        spaces = len(line) - len(rest)
        out.append(body_indent + indent_unit * (spaces // step) + " " * (spaces % step) + rest)
    return out
