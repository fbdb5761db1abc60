"""Host-side programs are assembled from parts into one self-contained ``python3 -I -S`` text."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.remote import agent_proc, fileagent_ops, hostprogram
from deploy.remote.hostprogram import PART_MARKER, program

PARTS = {"agent": agent_proc, "fileagent": fileagent_ops}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_the_program_inlines_its_parts_and_imports_nothing_from_deploy(name: str) -> None:
    text = program(name)
    assert not re.findall(r"^\s*(from|import) deploy\b", text, re.MULTILINE)
    assert PART_MARKER not in text
    tree = ast.parse(text, feature_version=(3, 8))  # the host's python3 may be 3.8
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    part = ast.parse(Path(str(PARTS[name].__file__)).read_text())
    assert {n.name for n in part.body if isinstance(n, ast.FunctionDef)} <= defined


def test_the_agent_program_runs_isolated() -> None:
    """``-I -S``, from ``/``: nothing but the program text and the standard library."""
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program("agent"), "probe"],
        input=json.dumps({"port": 1, "prefix": "no-such-title::"}).encode(),
        capture_output=True,
        cwd="/",
        check=True,
        timeout=30,
    )
    assert json.loads(out.stdout) == {
        "listeners": [],
        "pid_file_pid": None,
        "pid_file_process": None,
        "titled": [],
        "helper_ids": [os.geteuid(), os.getuid(), os.getgid()],
    }


def _without_prose(tree: ast.AST) -> ast.AST:
    """``tree`` with every bare-string statement removed (``pass`` where a block empties)."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [
                    s
                    for s in body
                    if not (
                        isinstance(s, ast.Expr)
                        and isinstance(s.value, ast.Constant)
                        and isinstance(s.value.value, str)
                    )
                ]
                setattr(node, field, kept or [ast.Pass()])
    return tree


@pytest.mark.parametrize("name", ["fileagent", "helperboot", "agent"])
def test_the_text_sent_is_the_same_code_without_its_prose(name: str) -> None:
    """Same syntax tree as the assembled source once its docstrings are gone, and at most
    three quarters of its bytes (the lock's command line carries the file helper on every run)."""
    assembled = hostprogram._assembled(name)
    sent = program(name)
    assert ast.dump(ast.parse(sent)) == ast.dump(_without_prose(ast.parse(assembled)))
    assert len(sent) < len(assembled) * 3 / 4


@pytest.mark.parametrize("name", hostprogram.NAMES)
def test_the_kept_stripped_texts_are_current(name: str) -> None:
    """What `program` returns without stripping at start-up must be made from today's source."""
    kept = (hostprogram.SHIPPED / f"{name}.txt").read_text()
    assert kept == hostprogram.shipped_text(name), "run python -m deploy.remote.hostprogram"
    assert program(name) == kept.partition("\n")[2]


@pytest.mark.parametrize(
    "damage",
    ["stale", "truncated", "not utf-8", "missing"],
)
def test_a_kept_text_that_cannot_serve_is_not_sent(
    damage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept text made from another source, cut short (with a header that was right), not
    UTF-8, or absent: the source is stripped afresh instead."""
    whole = hostprogram.shipped_text("helperboot")
    kept = {
        "stale": b"# sha256 of the source and stripper: 00 text 00\nprint('stale')\n",
        "truncated": whole.encode()[: len(whole) // 2],
        "not utf-8": whole.encode() + b"\xff\xfe",
    }
    if damage in kept:
        (tmp_path / "helperboot.txt").write_bytes(kept[damage])
    monkeypatch.setattr(hostprogram, "SHIPPED", tmp_path)
    program.cache_clear()
    try:
        assert program("helperboot") == hostprogram.stripped(hostprogram._assembled("helperboot"))
    finally:
        program.cache_clear()
