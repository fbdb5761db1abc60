"""Attacks on the interpreter trust check (`deploy.checks.interpreter`, and its Python twin
`deploy.remote.agent_trust`) that need no second user: the check must judge what CPython
itself reads, in bash and dash. The attacks that need a real user to run the interpreter as:
tests/integration/test_interpreter_attacks.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.remote.agent_trust import lookup_paths  # type: ignore[attr-defined]
from tests.unit.test_interpreter_trust import OTHER, SHELLS, _judge

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

#: A real CPython, whose getpath decides what a venv's ``home`` means.
BASE = os.path.realpath(sys.executable)


def _stdlib_prefix(root: Path) -> Path:
    """``root/bin`` and ``root/lib/python3.X`` holding this Python's own stdlib landmark and
    ``encodings``: CPython takes ``root`` as its prefix when a venv's ``home`` is ``root/bin``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(os.__file__).parent
    (root / "bin").mkdir(parents=True)
    (root / "lib" / version).mkdir(parents=True)
    shutil.copy(stdlib / "os.py", root / "lib" / version / "os.py")
    shutil.copytree(stdlib / "encodings", root / "lib" / version / "encodings")
    return root / "lib" / version


@pytest.mark.parametrize("shell", SHELLS)
def test_a_pyvenv_cfg_with_two_homes_is_judged_by_the_one_cpython_uses(
    tmp_path: Path, shell: str
) -> None:
    """Root's venv (``--copies``) whose ``pyvenv.cfg`` names two homes: another user's prefix
    first, the system's last. CPython's getpath stops at the first ``home`` (its encodings
    come from there), so the other user's prefix decides: the check must say untrusted. It
    judged the last one and trusted it."""
    theirs = tmp_path / "theirs"
    stdlib = _stdlib_prefix(theirs)
    for path in [theirs, *theirs.rglob("*")]:
        os.lchown(path, OTHER, OTHER)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    shutil.copy(BASE, python)
    (venv / "pyvenv.cfg").write_text(f"home = {theirs / 'bin'}\nhome = {Path(BASE).parent}\n")

    loaded = subprocess.run(
        [str(python), "-I", "-S", "-c", "import encodings; print(encodings.__file__)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert loaded == str(stdlib / "encodings" / "__init__.py"), "CPython uses the first home"

    verdict = _judge(shell, python)
    assert f"(uid {OTHER})" in verdict["reason"], verdict
    assert verdict["uid"] == str(OTHER)
    paths, reason = lookup_paths(str(python), {}, "/")
    assert reason is None
    assert str(theirs / "bin") in paths, "the lookup judges the first home too"
