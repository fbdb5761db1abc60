"""The one task every tool performs, and the proof that a tool really performed it.

The task is issue 6's: save a copy of SGLang 0.5.9's ``kimi_k25.py``, put the three EAGLE-3
delegation methods *inside* ``KimiK25ForConditionalGeneration``, check that the file compiles
and that its last line is still ``EntryClass = [KimiK25ForConditionalGeneration]``. The method
text is read from ``playbooks/kimi-eagle3.yaml`` so that ansible and pyinfra insert exactly the
bytes ``deploy`` inserts: a benchmark whose tools did different jobs measures nothing.

A tool can finish with exit status 0 and still have done the wrong thing (the classic mistake
is appending after ``EntryClass``, which compiles). So every timed run is followed, outside the
timing, by `check_patched` on every host's file; a tool whose result is wrong is reported as
such instead of being ranked.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import yaml

MODEL_CLASS = "KimiK25ForConditionalGeneration"
ENTRY_LINE = f"EntryClass = [{MODEL_CLASS}]"
EAGLE3_METHODS = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
#: Where an editable SGLang checkout keeps the file, below each sandbox host's root.
MODEL_REL = "sglang/python/sglang/srt/models/kimi_k25.py"
PLAYBOOK = "kimi-eagle3"
#: An awk/POSIX ERE (pyinfra) and Python regex (ansible) for the line to insert before.
ENTRY_REGEX = r"^EntryClass = \[KimiK25ForConditionalGeneration\]$"


def methods_source(playbook: Path) -> str:
    """The ``python_insert`` code of the playbook, indented as a class body (4 spaces).

    Raises:
        ValueError: the playbook has no ``python_insert`` step (it changed shape).
    """
    document = yaml.safe_load(playbook.read_text())
    for step in document.get("steps", []):
        insert = step.get("python_insert") if isinstance(step, dict) else None
        if isinstance(insert, dict) and isinstance(insert.get("code"), str):
            return textwrap.indent(
                insert["code"].rstrip("\n"), "    ", lambda line: bool(line.strip())
            )
    raise ValueError(f"{playbook}: no python_insert step with code")


def has_tag(playbook: Path, tag: str) -> bool:
    """Whether any step of the playbook carries ``tag`` (deploy refuses to skip an unused tag)."""
    document = yaml.safe_load(playbook.read_text())
    return any(
        isinstance(step, dict) and tag in (step.get("tags") or [])
        for step in document.get("steps", [])
    )


def check_patched(content: bytes) -> str | None:
    """None if the file has the three methods in the class, none at module level, and still
    ends with the EntryClass statement and line; otherwise what is wrong, in one line."""
    try:
        tree = ast.parse(content)
    except SyntaxError as exc:
        return f"does not parse: {exc.msg} (line {exc.lineno})"
    module = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == MODEL_CLASS]
    if len(classes) != 1:
        return f"{len(classes)} classes named {MODEL_CLASS}"
    members = [n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)]
    missing = [m for m in EAGLE3_METHODS if m not in members]
    if missing:
        return f"not in the class: {', '.join(missing)}"
    twice = [m for m in EAGLE3_METHODS if members.count(m) != 1]
    if twice:
        return f"defined more than once in the class: {', '.join(twice)}"
    leaked = sorted(module.intersection(EAGLE3_METHODS))
    if leaked:
        return f"at module level: {', '.join(leaked)}"
    if not tree.body or ast.unparse(tree.body[-1]) != ENTRY_LINE:
        return f"last statement is not {ENTRY_LINE!r}"
    lines = content.decode("utf-8", "replace").rstrip().splitlines()
    if not lines or lines[-1] != ENTRY_LINE:
        return f"last line is not {ENTRY_LINE!r}"
    return None
