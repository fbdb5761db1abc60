"""Where a pydantic error's ``loc`` points: the path in the file, and what the model says there.

pydantic's ``loc`` runs through the *model* (``('steps', 0, 'python_insert', 'python_insert',
'bogus')``: the second ``python_insert`` is the union tag). `walk_loc` follows it alongside the
type annotations, dropping union labels so that the path is the one a user sees in the YAML
file (``steps[0].python_insert.bogus``), and noting what it met on the way: the model whose key
is at fault, and the alternatives of an untagged union (``where: end | {after: NAME}``), in
words. `deploy.config.errors` turns that into the one-line message.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Tag

from deploy.config.yamlpos import KeyPath


def _unwrap(ann: Any) -> tuple[Any, str | None]:
    """Strip ``Annotated``; return the bare type and its pydantic ``Tag`` if it carries one."""
    tag = None
    while get_origin(ann) is Annotated:
        args = get_args(ann)
        for meta in args[1:]:
            if isinstance(meta, Tag):
                tag = meta.tag
        ann = args[0]
    return ann, tag


def _union_members(ann: Any) -> list[tuple[Any, str | None]] | None:
    if get_origin(ann) in (Union, types.UnionType):
        members = [_unwrap(arg) for arg in get_args(ann)]
        return [(m, tag) for m, tag in members if m is not type(None)]
    return None


def _label_matches(label: str, member: Any, tag: str | None) -> bool:
    if tag is not None:
        return label == tag
    if isinstance(member, type):
        name = member.__name__
        return label == name or label.endswith(f", {name}]")
    if get_origin(member) is Literal:
        return label.startswith("literal[")
    return label == str(member)


def _member_words(member: Any) -> str:
    if isinstance(member, type) and issubclass(member, BaseModel):
        return "a mapping"
    if get_origin(member) is Literal:
        return " or ".join(repr(v) for v in get_args(member))
    origin = get_origin(member)
    if origin in (list, tuple, set):
        return "a list"
    if origin is dict:
        return "a mapping"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        member, str(member)
    )


@dataclass
class LocWalk:
    """What walking one loc found: the path for humans and what the annotations say about it."""

    path: KeyPath
    parent_model: type[BaseModel] | None = None  # the model whose field is the last path item
    union_base: KeyPath | None = None  # where an alternatives (non-tagged) union was entered
    union_words: tuple[str, ...] = ()  # what each alternative expects, in words
    key_error: bool = False  # the problem is a mapping key itself, not its value


def walk_loc(root: Any, loc: Sequence[int | str]) -> LocWalk:
    """Follow pydantic's ``loc`` through the annotations from ``root``.

    Union labels (a step's action tag, ``literal['end']``, ``GroupSpec``...) are consumed
    without entering the path; a ``[key]`` item marks an error in a mapping key itself.
    """
    ann: Any = root
    walk = LocWalk(())
    items = list(loc)
    index = 0
    while index < len(items):
        item = items[index]
        ann, _ = _unwrap(ann)
        members = _union_members(ann)
        if members is not None and len(members) == 1:
            ann = members[0][0]
            continue
        if members is not None:
            label = str(item)
            chosen = next((m for m, t in members if _label_matches(label, m, t)), Any)
            is_tagged = any(t is not None for _, t in members)
            if not is_tagged and walk.union_base is None:
                walk.union_base = walk.path
                walk.union_words = tuple(_member_words(m) for m, _ in members)
            ann = chosen
            index += 1
            continue
        if item == "[key]":
            walk.key_error = True
            index += 1
            continue
        walk.parent_model = None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            walk.parent_model = ann
            field = next((f for n, f in ann.model_fields.items() if item in (n, f.alias)), None)
            ann = field.annotation if field is not None else Any
        elif get_origin(ann) in (list, tuple, set):
            args = get_args(ann)
            ann = args[0] if args else Any
        elif get_origin(ann) is dict:
            args = get_args(ann)
            ann = args[1] if len(args) == 2 else Any
        else:
            ann = Any
        walk.path = (*walk.path, item)
        index += 1
    return walk
