"""deploy's own words never trip its secret masking.

Everything deploy writes passes through `deploy.masking`, whose ``NAME=`` rule hides what follows
an upper-case secret-looking name. ``-e KEY=VALUE`` is such a text: every ``--help`` showed
``-e, --extra-vars KEY=***`` and a malformed ``-e`` was told ``expected KEY=*** or
@FILE.yaml``. Each command's help, and that error, are read from the program as an operator
runs it (a fresh interpreter, the console script's ``main``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from deploy.cli import main as group
from deploy.masking import MASK

REPO = Path(__file__).resolve().parents[2]


def _deploy(*argv: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "deploy.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + done.stderr


def test_no_help_text_is_masked() -> None:
    assert isinstance(group, click.Group)
    commands = sorted(group.list_commands(click.Context(group)))
    assert {"apply", "rollback", "schedule"} <= set(commands)
    masked = [name for name in ["", *commands] if MASK in _deploy(*name.split(), "--help")]
    assert not masked, f"help shows {MASK} for: {masked}"


def test_a_malformed_extra_var_is_told_in_clear(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  a: {address: 127.0.0.1, port: 1}\n")
    said = _deploy("apply", "kimi-eagle3", "-i", str(inventory), "-e", "foo", "--check")
    assert "expected NAME=VALUE or @FILE.yaml, got 'foo'" in said, said
