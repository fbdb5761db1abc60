"""Turn pydantic's `ValidationError` into one-line `InputError`s that point into the YAML file.

pydantic describes a problem by a ``loc`` through the *model* (``('steps', 0, 'python_insert',
'python_insert', 'bogus')``: the second ``python_insert`` is the union tag) and in its own
words ("Extra inputs are not permitted"). Users think in the *file*: ``steps[0].python_insert
.bogus`` on line 12, "unknown key 'bogus' (allowed: path, class, ...)". The loc is walked
alongside the model's type annotations (`deploy.config.modelpath`), which drops union labels;
this module then lists the keys a mapping allows, names what was expected, and looks the path
up in `Positions`.

Union alternatives (``where: end | {after: NAME}``) make pydantic report one error per
alternative; they are folded into one problem: the alternative the input got furthest in if
there is one, else "expected 'end' or a mapping, got 'x'".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from deploy.config.steps import COMMON_KEYS, STEP_MODELS
from deploy.config.yamlpos import KeyPath, Positions, describe_type, one_line, path_item
from deploy.errors import InputError

if TYPE_CHECKING:
    from deploy.config.modelpath import LocWalk

#: pydantic error types that mean "the value is not of the right kind", and that kind in words.
_EXPECTED = {
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_parsing_size": "an integer of sensible size",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "none_required": "nothing (null)",
}
#: Of those, the ones where the offending value says more than its type ("got 'abc'").
_SHOW_VALUE = {
    "int_parsing",
    "int_parsing_size",
    "int_from_float",
    "float_parsing",
    "bool_parsing",
    "literal_error",
}

_MISSING: Any = object()


def suggest(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or '' when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def short(value: Any, limit: int = 40) -> str:
    """A value as it appears in a message: repr, one line, cut to ``limit`` characters."""
    text = one_line(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_at(data: Any, path: Sequence[Any]) -> Any:
    """The item of nested ``data`` at ``path``, or the `_MISSING` sentinel."""
    for item in path:
        in_dict = isinstance(data, dict) and item in data
        in_list = isinstance(data, list) and isinstance(item, int) and 0 <= item < len(data)
        if not (in_dict or in_list):
            return _MISSING
        data = data[item]
    return data


# --- messages ---------------------------------------------------------------------------------


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    """The model's keys in declaration order, except that options a base class marks
    ``KEYS_LAST`` (the file safety options every writing step shares) come after what makes
    the step what it is."""
    last = {
        name
        for base in model.__mro__
        if getattr(base, "__dict__", {}).get("KEYS_LAST")
        for name in getattr(base, "__annotations__", {})
    }
    fields = model.model_fields.items()
    ordered = [*(i for i in fields if i[0] not in last), *(i for i in fields if i[0] in last)]
    return [f.alias or name for name, f in ordered]


def _unknown_step(raw: Any) -> tuple[str, KeyPath]:
    """The message for a step that is not exactly one known action, and the sub-path to blame."""
    steps = ", ".join(STEP_MODELS)
    if not isinstance(raw, dict):
        return f"expected a step (a mapping with one action key), got {describe_type(raw)}", ()
    actions = [k for k in raw if k in STEP_MODELS]
    if len(actions) > 1:
        found = " and ".join(repr(a) for a in actions)
        return f"a step has exactly one action, found {found} (split it into steps)", ()
    others = [k for k in raw if k not in COMMON_KEYS and k not in STEP_MODELS]
    if others:
        name = str(others[0])
        return f"unknown step {name!r} (steps: {steps}){suggest(name, STEP_MODELS)}", (others[0],)
    return f"a step needs an action key (steps: {steps})", ()


def _message(err: ErrorDetails, walk: LocWalk, raw: Any) -> tuple[str, KeyPath, bool]:
    """Plain words for one error; also any extra path to blame, and whether to point at a key."""
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "unknown_step":
        message, extra = _unknown_step(raw)
        return message, extra, bool(extra)
    if kind == "extra_forbidden":
        key = str(walk.path[-1]) if walk.path else "?"
        if walk.parent_model is None:
            return f"unknown key {key!r}", (), True
        allowed = _allowed_keys(walk.parent_model)
        # In a step, the misspelt key may be the action itself: suggest those too.
        is_step = set(allowed) >= COMMON_KEYS
        hint = suggest(key, [*allowed, *STEP_MODELS] if is_step else allowed)
        return f"unknown key {key!r} (allowed: {', '.join(allowed)}){hint}", (), True
    if kind == "missing":
        key = str(walk.path[-1]) if walk.path else "?"
        return f"missing required key {key!r}", (), False
    if walk.key_error:
        if isinstance(value, bool) or value is None:
            written = "a boolean" if isinstance(value, bool) else "null"
            return f"this key reads as {written} in YAML: quote it", (), True
        return f"key {value!r} must be a string (quote it: '{value}')", (), True
    if kind in _EXPECTED or kind == "literal_error":
        expected = ctx.get("expected", "?") if kind == "literal_error" else _EXPECTED[kind]
        got = short(value) if kind in _SHOW_VALUE else describe_type(value)
        return f"expected {expected}, got {got}", (), False
    if kind in ("value_error", "assertion_error"):
        text = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return text, (), False
    if kind == "too_short" and "min_length" in ctx:
        n = ctx["min_length"]
        items = "item" if n == 1 else "items"
        return f"needs at least {n} {items}, got {ctx.get('actual_length')}", (), False
    if kind == "recursion_loop":
        return "the data refers to itself (recursive aliases are not allowed)", (), False
    text = err["msg"].replace("Input should be", "must be")
    if kind.startswith(("greater", "less", "string_too", "too_")):
        text += f", got {short(value)}"
    return text, (), False


@dataclass(frozen=True)
class _Problem:
    """One problem and where it sorts: file order (line, column)."""

    error: InputError
    order: tuple[int, int]


def validation_problems(
    exc: ValidationError,
    *,
    root: Any,
    data: Any,
    positions: Positions,
    base: KeyPath = (),
) -> list[InputError]:
    """Every problem in ``exc``, one `InputError` each, in file order.

    ``root`` is the type that was validated (a model class, or an annotation such as
    ``StepEntry``), ``data`` the raw input, and ``base`` the key path of that input inside
    the file ``positions`` describes (``("steps", 3)`` when one step was validated).
    """
    # Only input with a problem gets here: valid input never loads the loc walker.
    from deploy.config.modelpath import walk_loc

    groups: dict[KeyPath, list[tuple[ErrorDetails, LocWalk]]] = {}
    singles: list[tuple[ErrorDetails, LocWalk]] = []
    for err in exc.errors(include_url=False):
        walk = walk_loc(root, err["loc"])
        if walk.key_error and walk.path:  # pydantic writes a True key as 1: use the key itself
            walk.path = (*walk.path[:-1], path_item(err.get("input")))
        if walk.union_base is not None:
            groups.setdefault(walk.union_base, []).append((err, walk))
        else:
            singles.append((err, walk))
    chosen = list(singles)
    union_messages: list[tuple[KeyPath, str]] = []
    for union_base, errs in groups.items():
        deeper = [
            (e, w)
            for e, w in errs
            if w.path != union_base or (e["type"] not in _EXPECTED and e["type"] != "literal_error")
        ]
        if deeper:
            chosen.append(deeper[0])
        else:
            words = " or ".join(dict.fromkeys(errs[0][1].union_words))
            value = value_at(data, union_base)
            got = short(value) if isinstance(value, str) else describe_type(value)
            union_messages.append((union_base, f"expected {words}, got {got}"))

    problems: list[_Problem] = []

    def add(path: KeyPath, message: str, prefer_key: bool) -> None:
        position = positions.locate((*base, *path), prefer_key=prefer_key)
        order = (position.line or 1 << 30, position.column or 0)
        problems.append(_Problem(InputError(one_line(message), position), order))

    for err, walk in chosen:
        raw = value_at(data, walk.path)
        message, extra, prefer_key = _message(err, walk, raw)
        add((*walk.path, *extra), message, prefer_key)
    for path, message in union_messages:
        add(path, message, False)
    problems.sort(key=lambda p: p.order)
    return [p.error for p in problems]


def validation_error(
    exc: ValidationError,
    *,
    root: Any,
    data: Any,
    positions: Positions,
    base: KeyPath = (),
    suffix: str = "",
) -> InputProblems:
    """The first problem of ``exc`` in file order, as one `InputError` with "(+N more)".

    ``suffix`` is appended to the message (e.g. `` (host gpu-1)``).
    """
    problems = validation_problems(exc, root=root, data=data, positions=positions, base=base)
    if not problems:  # pydantic always reports at least one; be safe anyway
        problems = [InputError(one_line(str(exc)), positions.locate(base))]
    return InputProblems(problems, suffix)


class InputProblems(InputError):
    """Several problems found at once: reads as the first one plus "(+N more)".

    ``problems`` keeps every one, for ``deploy validate``, which shows them all.
    """

    def __init__(self, problems: list[InputError], suffix: str = "") -> None:
        self.problems = problems
        first = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(first.message + suffix + more, first.position)


class Problems:
    """Raise the first problem (``resolve``) or collect them all (``deploy validate``).

    A problem found while resolving for one host carries that host; collected, the same
    problem on several hosts becomes one line naming them all.
    """

    def __init__(self, collect: bool) -> None:
        self.collect = collect
        self.found: list[tuple[InputError, str | None]] = []

    def report(self, error: InputError, host: str | None = None) -> None:
        if not self.collect:
            if host is None:
                raise error
            raise InputError(f"{error.message} (host {one_line(host)})", error.position)
        for problem in getattr(error, "problems", None) or [error]:
            self.found.append((problem, host))

    @staticmethod
    def expand(error: InputError) -> list[str]:
        """Every problem an error stands for (an `InputProblems` holds several), as lines."""
        return [str(p) for p in getattr(error, "problems", None) or [error]]

    def lines(self) -> list[str]:
        """One line per distinct problem; the same problem on several hosts is listed once."""
        hosts: dict[str, list[str]] = {}
        for error, host in self.found:
            hosts.setdefault(str(error), [])
            if host is not None and host not in hosts[str(error)]:
                hosts[str(error)].append(host)
        lines = []
        for text, names in hosts.items():
            if names:
                shown = ", ".join(one_line(name) for name in names)
                text += f" (host{'s' if len(names) > 1 else ''} {shown})"
            lines.append(text)
        return lines
