"""The code base stays ruff-clean and mypy --strict clean: CI runs this with the rest of the tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_check_is_clean() -> None:
    # This interpreter's ruff: a venv's bin/ need not be on PATH (`.venv/bin/python -m pytest`).
    assert importlib.util.find_spec("ruff"), (
        "ruff is part of the [test] extra: pip install -e '.[test]'"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", "deploy", "tests", "bench", "tools"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean() -> None:
    """``ruff format --check .`` passes: the code and, as ruff formats them, the Python blocks of
    the Markdown docs (docs/api.md's examples are what a user copies)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--quiet", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_is_clean() -> None:
    """The package type-checks under ``mypy --strict`` (configured in pyproject.toml)."""
    assert importlib.util.find_spec("mypy"), (
        "mypy is part of the [test] extra: pip install -e '.[test]'"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
