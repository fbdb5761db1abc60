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

from deploy.hostpy import PART_MARKER, agent_proc, fileagent_ops, program

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
    answer = json.loads(out.stdout)
    # The helper's own cgroup (this machine's), to tell a unit's server from a login's.
    assert isinstance(answer.pop("helper_cgroup"), str)
    assert answer == {
        "listeners": [],
        "pid_file_process": None,
        "helper_ids": [os.geteuid(), os.getuid(), os.getgid()],
    }
