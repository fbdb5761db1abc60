"""Semantic checks of a Python file: the contract the running program relies on, via ``ast``.

"It compiles" proves little: methods appended after ``EntryClass = [...]`` compile fine and the
server dies at start-up with ``AttributeError``. These checks say what must be true instead:
the class defines the names (directly in its body), the names are not at module level, and the
module still ends with the statement it ended with. Each problem is one line for the report.

The structural helpers here (`statement_names`, `find_classes`, `class_names`) are also what
``deploy.edits.pyinsert`` uses, so "the class has X" means the same to the edit and the check.
Nothing here performs I/O.
"""

from __future__ import annotations

import ast

from deploy.checks.parsing import parse
from deploy.memo import once

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def statement_names(stmt: ast.stmt) -> list[str]:
    """The names a class-body or module-level statement binds: def, class, or assignment."""
    if isinstance(stmt, _DEFS):
        return [stmt.name]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    names: list[str] = []
    while targets:
        target = targets.pop(0)
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
    return names


def find_classes(tree: ast.Module, dotted: str) -> list[ast.ClassDef]:
    """Every class ``dotted`` names: a module-level class, then classes nested in its body.

    A top-level name never matches a class nested elsewhere (in a function or another class):
    that is a different class. Several results mean the name is defined more than once; at run
    time the last one wins.
    """
    found: list[ast.ClassDef] = []
    scopes: list[list[ast.stmt]] = [tree.body]
    for part in dotted.split("."):
        found = [
            stmt
            for body in scopes
            for stmt in body
            if isinstance(stmt, ast.ClassDef) and stmt.name == part
        ]
        scopes = [cls.body for cls in found]
    return found


def class_names(tree: ast.Module) -> list[str]:
    """Dotted names of every class `find_classes` can reach, in file order: A, A.Inner, B."""
    names: list[str] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                names.append(prefix + stmt.name)
                walk(stmt.body, f"{prefix}{stmt.name}.")

    walk(tree.body, "")
    return names


def module_level_definitions(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of every def, class and assignment that binds a module-level name.

    Statements inside module-level ``if``/``try``/``with``/``for``/``while``/``match`` blocks
    count (they still bind module globals); bodies of functions and classes do not.
    """
    found: list[tuple[str, int]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        stmt = pending.pop(0)
        found.extend((name, stmt.lineno) for name in statement_names(stmt))
        if isinstance(stmt, _DEFS):
            continue
        for field in ("body", "orelse", "finalbody"):
            pending.extend(s for s in getattr(stmt, field, []) if isinstance(s, ast.stmt))
        for handler in getattr(stmt, "handlers", []):
            pending.extend(handler.body)
        for case in getattr(stmt, "cases", []):
            pending.extend(case.body)
    return sorted(found, key=lambda item: item[1])


def check_python(
    source: bytes,
    *,
    class_has: dict[str, list[str]] | None = None,
    not_module_level: list[str] | None = None,
    last_statement: str | None = None,
    path: str = "<file>",
) -> list[str]:
    """The problems found in ``source``, one line each; an empty list means it passes.

    Args:
        class_has: class (dotted for nested) -> names it must define directly in its body
            (def, async def, class or assignment; inherited or set in ``__init__`` do not count).
        not_module_level: names that must not be bound at module level.
        last_statement: source of the statement the module must end with, compared by AST
            (formatting and comments do not count).
        path: used in messages only.

    A file that does not parse gives exactly one problem, "PATH:LINE: does not parse: MSG".
    Computed once per distinct input across the run's hosts (`deploy.memo`), whatever the
    path: every problem starts with the path, which is put in front of the shared answer.

    Raises:
        ValueError: ``last_statement`` is not exactly one statement of valid Python (a
            mistake in the playbook, which the config layer should have caught).
    """
    found = _problems(
        source,
        class_has=class_has,
        not_module_level=not_module_level,
        last_statement=last_statement,
    )
    return [path + problem for problem in found]


@once
def _problems(
    source: bytes,
    *,
    class_has: dict[str, list[str]] | None,
    not_module_level: list[str] | None,
    last_statement: str | None,
) -> tuple[str, ...]:
    """`check_python`'s problems without the path they start with, so that hosts holding the
    same bytes at different paths share one computation; the caller puts its path in front."""
    path = ""  # every message starts with the path: `check_python` puts it in front
    expected_last = _one_statement(last_statement) if last_statement is not None else None
    try:
        tree = parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else path
        return (f"{where}: does not parse: {getattr(exc, 'msg', exc)}",)
    problems: list[str] = []
    for dotted, names in (class_has or {}).items():
        problems += _class_problems(tree, dotted, names, path)
    banned = set(not_module_level or [])
    for name, line in module_level_definitions(tree):
        if name in banned:
            problems.append(
                f"{path}: {name} is defined at module level (line {line}), outside any class"
            )
    if expected_last is not None and last_statement is not None:
        problem = _last_statement_problem(tree, source, expected_last, last_statement, path)
        if problem:
            problems.append(problem)
    return tuple(problems)


def _one_statement(text: str) -> ast.stmt:
    try:
        module = parse(text)
    except SyntaxError as exc:
        raise ValueError(f"last_statement {text!r} is not valid Python: {exc.msg}") from exc
    if len(module.body) != 1:
        raise ValueError(f"last_statement {text!r} must be one statement, not {len(module.body)}")
    return module.body[0]


def _class_problems(tree: ast.Module, dotted: str, names: list[str], path: str) -> list[str]:
    found = find_classes(tree, dotted)
    if not found:
        there = ", ".join(class_names(tree)) or "none"
        return [f"{path}: class {dotted} not found; classes there: {there}"]
    cls = found[-1]
    defined = {name for stmt in cls.body for name in statement_names(stmt)}
    return [
        f"{path}: class {dotted} (line {cls.lineno}) does not define {name} in its body"
        for name in names
        if name not in defined
    ]


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def _last_statement_problem(
    tree: ast.Module, source: bytes, expected: ast.stmt, text: str, path: str
) -> str | None:
    if not tree.body:
        return f"{path}: the module has no statements; expected it to end with {text!r}"
    last = tree.body[-1]
    if _dump(last) == _dump(expected):
        return None
    lines = source.splitlines()
    shown = lines[last.lineno - 1].decode("utf-8", errors="replace").strip()
    if len(shown) > 100:
        shown = shown[:97] + "..."
    elsewhere = [s.lineno for s in tree.body if _dump(s) == _dump(expected)]
    hint = f", which is at line {elsewhere[-1]}" if elsewhere else ", which is nowhere at top level"
    return f"{path}: the last statement is {shown!r} (line {last.lineno}); expected {text!r}{hint}"
