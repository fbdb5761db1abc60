"""Insert methods (or other definitions) into a Python class, by line splicing guided by ``ast``.

The edit DESIGN.md is about: SGLang 0.5.9's ``KimiK25ForConditionalGeneration`` needs three
EAGLE-3 methods *inside* its body, before the module-level ``EntryClass = [...]``, and a re-run
on 0.5.10 (which has them) must change nothing. How it stays safe:

* the file is never re-generated (no ``ast.unparse``): ``ast`` only supplies line numbers, and
  the new lines are spliced between the original bytes, which stay byte-for-byte identical
  (newline style, encoding, a missing final newline, comments, formatting);
* the code is dedented, then re-indented to the class body's own indentation (the same spaces,
  or tabs), and written with the file's newline style and encoding;
* each top-level definition in the code is compared with the class member of the same name by
  ``ast.dump`` (formatting and comments do not count, docstrings do): equal ones are skipped; a
  different one is decided by ``if_exists``: ``"fail"`` (the default) raises `MemberConflict`,
  ``"replace"`` overwrites it in place, ``"keep"`` leaves it as it is. ``keep`` is for backports:
  a later release that already defines the method, with whatever body, decorators or ``async``,
  is in the desired state. Each name is decided on its own, so with one of three methods
  present the other two are still inserted and the present one is kept byte for byte;
* the result must parse and contain every name, or the edit is refused.

Placement ``"end"`` goes after the class's last statement and after the comment lines that
follow it indented deeper than the ``class`` keyword (they read as part of the class), but
before blank lines and anything at the class's own level. ``("before", NAME)`` goes above
NAME's decorators and the comment lines directly above it; ``("after", NAME)`` goes after NAME
and the comments indented deeper than it. Inserted items are separated from each other and
from their neighbours by exactly one blank line, as black does inside a class body.
"""

from __future__ import annotations

import ast
from typing import Literal

from deploy.checks.parsing import parse
from deploy.checks.python_ast import class_names, find_classes, statement_names
from deploy.edits.pyinsert_code import Item, code_items
from deploy.edits.result import EditResult
from deploy.edits.text import (
    detect_newline,
    encode_fragment,
    line_ending,
    strip_ending,
)
from deploy.errors import EditError
from deploy.memo import once_ignoring

Where = str | tuple[str, str]
#: What to do with a class member of the same name whose definition differs from the code's.
IfExists = Literal["keep", "replace", "fail"]
IF_EXISTS: tuple[IfExists, ...] = ("keep", "replace", "fail")


class ClassNotFound(EditError):
    """The class to edit is not in the file (the message lists the classes that are)."""


class MemberConflict(EditError):
    """The class already has a member of that name with a different definition."""

    def __init__(self, message: str, *, member: str, class_name: str, path: str, line: int):
        self.member = member
        self.class_name = class_name
        self.path = path
        self.line = line
        super().__init__(message)


def _parse(source: bytes, path: str) -> ast.Module:
    """Parse file bytes (coding cookie and BOM honoured), or "PATH:LINE: does not parse"."""
    try:
        return parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else path
        raise EditError(f"{where}: does not parse: {getattr(exc, 'msg', exc)}") from exc


@once_ignoring("path")
def insert_into_class(
    source: bytes,
    class_name: str,
    code: str,
    *,
    where: Where = "end",
    if_exists: IfExists = "fail",
    path: str = "<file>",
) -> EditResult:
    """Insert the definitions in ``code`` into class ``class_name`` of ``source``.

    Args:
        source: the file's bytes.
        class_name: a module-level class, or a dotted path to a nested one ("Outer.Inner").
        code: definitions (def, async def, class, single-name assignments) at any indentation.
        where: ``"end"``, ``("after", NAME)`` or ``("before", NAME)``; NAME is a class member.
        if_exists: for a same-named member whose definition differs: ``"fail"`` raises,
            ``"replace"`` overwrites it in place, ``"keep"`` leaves it untouched (counted as
            present). A member with the same AST is always left alone.
        path: used in messages only (so a fleet holding the same bytes at different paths
            computes the edit once: `deploy.memo.once_ignoring`).

    Returns:
        ``changed=False`` when every definition is already there with the same AST (or, with
        ``keep``, under the same name); the content is then ``source`` itself.

    Raises:
        ClassNotFound: no such class (the message lists the classes there).
        MemberConflict: a same-named member differs, and ``if_exists`` is ``"fail"``.
        EditError: the file or the code does not parse, the anchor is not a member, the class
            is defined twice or has its body on the ``class`` line, the code holds statements
            that are not definitions, or (a bug) the result would not parse.
    """
    if if_exists not in IF_EXISTS:
        raise EditError(f"if_exists must be one of {', '.join(IF_EXISTS)}, not {if_exists!r}")
    tree = _parse(source, path)
    lines = source.splitlines(keepends=True)
    cls = _the_class(tree, class_name, path)
    body_indent = _body_indent(cls, lines, class_name, path)
    items = code_items(code, body_indent, _indent_unit(body_indent, lines[cls.lineno - 1]))
    members = {name: stmt for stmt in cls.body for name in statement_names(stmt)}

    present: list[str] = []
    kept: list[str] = []
    inserts: list[Item] = []
    replaced: list[tuple[Item, ast.stmt]] = []
    for item in items:
        member = members.get(item.name)
        if member is None:
            inserts.append(item)
        elif _same(member, item.node):
            present.append(item.name)
        elif if_exists == "keep":
            kept.append(item.name)
        elif if_exists == "replace":
            replaced.append((item, member))
        else:
            raise MemberConflict(
                f"{path}:{member.lineno}: class {class_name} already has {item.name} "
                f"(line {member.lineno}) with a different definition; "
                "set if_exists: keep to leave it, or if_exists: replace to overwrite it",
                member=item.name,
                class_name=class_name,
                path=path,
                line=member.lineno,
            )
    if not inserts and not replaced:
        reasons = []
        if present:
            reasons.append(f"{', '.join(present)} already present with the same body")
        if kept:
            reasons.append(f"{', '.join(kept)} already defined with another body (kept)")
        return EditResult(source, False, f"no change: {'; '.join(reasons)} in class {class_name}")

    edits: list[tuple[int, int, list[str]]] = []
    parts: list[str] = []
    for item, member in replaced:
        start, end = _member_span(member, lines)
        edits.append((start, end, item.text))
        parts.append(f"replaced {item.name} (line {member.lineno}) in class {class_name}")
    if inserts:
        at, first, label = _insertion_point(cls, where, members, lines, class_name)
        edits.append((at, at, _padded(inserts, lines, at, first)))
        parts.append(f"inserted {', '.join(i.name for i in inserts)} {label} class {class_name}")
    summary = "; ".join(parts)
    notes = [f"{', '.join(present)} already present"] if present else []
    if kept:
        notes.append(f"{', '.join(kept)} kept as defined")
    if notes:
        summary += f" ({'; '.join(notes)})"

    content = _splice(source, lines, edits)
    _verify(content, class_name, [i for i in items if i.name not in kept], kept, path)
    return EditResult(content, True, summary)


def _the_class(tree: ast.Module, class_name: str, path: str) -> ast.ClassDef:
    found = find_classes(tree, class_name)
    if not found:
        there = ", ".join(class_names(tree)) or "none"
        raise ClassNotFound(f"class {class_name} not found in {path}; classes there: {there}")
    if len(found) > 1:
        where = ", ".join(str(cls.lineno) for cls in found)
        raise EditError(
            f"class {class_name} is defined {len(found)} times in {path} (lines {where}); "
            "refusing to guess which one to edit"
        )
    return found[0]


def _indent(line: bytes) -> str:
    text = strip_ending(line).decode("latin-1")
    return text[: len(text) - len(text.lstrip(" \t\f"))]


def _width(indent: str) -> int:
    return len(indent.expandtabs(8))


def _body_indent(cls: ast.ClassDef, lines: list[bytes], class_name: str, path: str) -> str:
    """The exact leading whitespace of the class body, from its first statement on its own line."""
    for stmt in cls.body:
        indent = _indent(lines[stmt.lineno - 1])
        if stmt.col_offset == len(indent):
            return indent
    raise EditError(
        f"{path}:{cls.lineno}: class {class_name} has its body on the class line; "
        "put the body on its own lines first"
    )


def _indent_unit(body_indent: str, class_line: bytes) -> str:
    """One level of the file's indentation: a tab, or the spaces the body is indented by."""
    if body_indent.endswith("\t"):
        return "\t"
    step = _width(body_indent) - _width(_indent(class_line))
    return " " * (step if step > 0 else 4)


def _same(member: ast.stmt, node: ast.stmt) -> bool:
    return ast.dump(member, include_attributes=False) == ast.dump(node, include_attributes=False)


def _first_line(stmt: ast.stmt) -> int:
    """1-based first line of a statement, decorators included."""
    decorators: list[ast.expr] = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _is_comment(line: bytes) -> bool:
    return strip_ending(line).lstrip(b" \t\f").startswith(b"#")


def _is_blank(line: bytes) -> bool:
    return not strip_ending(line).strip(b" \t\f")


def _after(stmt_end: int, lines: list[bytes], deeper_than: int) -> int:
    """0-based index just after ``stmt_end`` (1-based) and the comments indented deeper than
    ``deeper_than`` that follow it (through blank lines between them, not after the last)."""
    best = index = stmt_end
    while index < len(lines):
        if _is_blank(lines[index]):
            index += 1
        elif _is_comment(lines[index]) and _width(_indent(lines[index])) > deeper_than:
            index += 1
            best = index
        else:
            break
    return best


def _member_span(member: ast.stmt, lines: list[bytes]) -> tuple[int, int]:
    """0-based [start, end) of a member: its decorators, itself, and its trailing inner comments."""
    column = _width(_indent(lines[member.lineno - 1]))
    return _first_line(member) - 1, _after(member.end_lineno or member.lineno, lines, column)


def _insertion_point(
    cls: ast.ClassDef, where: Where, members: dict[str, ast.stmt], lines: list[bytes], name: str
) -> tuple[int, bool, str]:
    """(0-based index to insert before, whether that is the top of the body, label for humans)."""
    class_column = _width(_indent(lines[cls.lineno - 1]))
    last = cls.body[-1]
    if where == "end":
        return _after(last.end_lineno or last.lineno, lines, class_column), False, "at the end of"
    if not (isinstance(where, tuple) and len(where) == 2 and where[0] in ("after", "before")):
        raise EditError(f"where must be 'end', ('after', NAME) or ('before', NAME), not {where!r}")
    side, anchor = where
    member = members.get(anchor)
    if member is None:
        there = ", ".join(members) or "none"
        raise EditError(f"anchor {anchor} is not a member of class {name} (members: {there})")
    label = f"{side} {anchor} in"
    if side == "after":
        if member is last:
            return _after(last.end_lineno or last.lineno, lines, class_column), False, label
        column = _width(_indent(lines[member.lineno - 1]))
        return _after(member.end_lineno or member.lineno, lines, column), False, label
    position = cls.body.index(member)
    floor = (cls.body[position - 1].end_lineno or 0) if position else cls.lineno
    start = _first_line(member) - 1
    column = _width(_indent(lines[member.lineno - 1]))
    while start > floor and _is_comment(lines[start - 1]):
        if _width(_indent(lines[start - 1])) != column:
            break
        start -= 1
    return start, position == 0, label


def _padded(items: list[Item], lines: list[bytes], at: int, top_of_body: bool) -> list[str]:
    """The inserted lines: items one blank line apart, and from non-blank neighbours."""
    out: list[str] = []
    if at > 0 and not top_of_body and not _is_blank(lines[at - 1]):
        out.append("")
    for index, item in enumerate(items):
        if index:
            out.append("")
        out.extend(item.text)
    if at < len(lines) and not _is_blank(lines[at]):
        out.append("")
    return out


def _splice(source: bytes, lines: list[bytes], edits: list[tuple[int, int, list[str]]]) -> bytes:
    """Replace ``lines[start:end]`` by each edit's text (in the file's newline and encoding)."""
    newline = detect_newline(source)
    out = list(lines)
    no_final_newline = bool(lines) and not line_ending(lines[-1])
    touches_end = any(end == len(lines) for _, end, _ in edits)
    if no_final_newline and touches_end:
        out[-1] += newline
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out[start:end] = [encode_fragment(line, source) + newline for line in text]
    if no_final_newline and touches_end and out:
        out[-1] = strip_ending(out[-1])
    return b"".join(out)


def _verify(content: bytes, class_name: str, items: list[Item], kept: list[str], path: str) -> None:
    """Refuse a result that does not parse, where a member is not exactly the code given, or
    where a kept member is gone: each would be a bug here, and it guarantees that a re-run is a
    no-op."""
    try:
        found = find_classes(parse(content, filename=path), class_name)
    except (SyntaxError, ValueError) as exc:
        raise EditError(
            f"{path}: the edited file would not parse (line {getattr(exc, 'lineno', '?')}: "
            f"{getattr(exc, 'msg', exc)}); nothing was changed. This is a bug, please report it"
        ) from exc
    members = {n: stmt for stmt in (found[0].body if found else []) for n in statement_names(stmt)}
    wrong = [i.name for i in items if i.name not in members or not _same(members[i.name], i.node)]
    wrong += [name for name in kept if name not in members]
    if wrong:
        raise EditError(
            f"{path}: after the edit class {class_name} does not hold {', '.join(wrong)} as "
            "given; nothing was changed. This is a bug, please report it"
        )
