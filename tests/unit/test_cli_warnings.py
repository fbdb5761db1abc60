"""A library's Python warning stays off the operator's terminal; ``-v`` shows it.

paramiko 3.4.0 under a recent cryptography printed four ``CryptographyDeprecationWarning`` lines
before every command's output, a bad input's one line included. The console script holds such
warnings back (`deploy.cli.common.quiet_warnings`); ``-v`` prints them as log lines. Each case
runs the program in a fresh interpreter the way the console script does (``main()`` with no
arguments: the process is deploy's), with a warning raised inside the command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Loading the inventory raises a warning, as importing paramiko 3.4.0 did inside a command.
_PROGRAM = """
import sys, warnings
import deploy.config.inventory_file as inventory_file
loaded = inventory_file.load_inventory
def load(*args, **kwargs):
    warnings.warn("a library says: this API moved (deploy-test-marker)", UserWarning)
    return loaded(*args, **kwargs)
inventory_file.load_inventory = load
from deploy.cli import main
sys.argv = ["deploy", *sys.argv[1:]]
main()
"""


def _deploy(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_library_warning_does_not_reach_the_terminal() -> None:
    result = _deploy("apply", "kimi-eagle3", "--list-hosts")
    assert result.returncode == 0, result.stderr
    assert "gpu-1" in result.stdout
    assert result.stderr == ""


def test_a_bad_input_is_still_one_line() -> None:
    result = _deploy("apply", "no-such-playbook", "--yes")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Warning" not in result.stderr


def test_verbose_shows_it_as_a_log_line() -> None:
    result = _deploy("apply", "kimi-eagle3", "--list-hosts", "-v")
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "deploy-test-marker" in x]
    assert line.startswith("deploy.warnings: ") and "UserWarning" in line
