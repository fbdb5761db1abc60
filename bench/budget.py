"""The round-trip budget, read from the test that enforces it (one source of truth).

``tests/integration/test_round_trips.py`` defines, at its top, the most SSH operations per
host that ``deploy``'s change run and no-change re-run may make; the test fails when a change
adds round trips. The benchmark writes the same numbers into ``docs/performance.md`` by
reading them from that file's source with `ast.literal_eval` — not by importing it, which
would pull pytest and the fixtures into the benchmark.
"""

from __future__ import annotations

import ast
from pathlib import Path

BUDGET_FILE = Path(__file__).resolve().parents[1] / "tests/integration/test_round_trips.py"
#: The constants' names in the test file, and the run each one limits.
NAMES = {"change": "CHANGE_RUN_BUDGET", "rerun": "RERUN_BUDGET"}


def load(path: Path = BUDGET_FILE) -> dict[str, dict[str, int]]:
    """``{"change": {"exec": N, "sftp": M}, "rerun": {...}}`` from the test file.

    Raises:
        ValueError: a constant is missing or is not a literal ``{str: int}`` dict.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    found: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    found[target.id] = node.value
    budget: dict[str, dict[str, int]] = {}
    for kind, name in NAMES.items():
        if name not in found:
            raise ValueError(f"{path}: no {name} constant")
        value = ast.literal_eval(found[name])
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in value.items()
        ):
            raise ValueError(f"{path}: {name} must be a literal dict of str to int")
        budget[kind] = value
    return budget
