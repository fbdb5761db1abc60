"""The anchors' interpreter: one venv with ansible-core and pyinfra, built once per machine.

The venv lives in the user's cache (``$XDG_CACHE_HOME/deploy/bench-venv``), never in the
repository, and is rebuilt only when the pinned requirements change (a stamp file records
them). The versions are pinned so that two runs of the benchmark compare the same anchors;
bump them here, deliberately, and the next run rebuilds. It uses this interpreter's Python, so
the anchors and ``deploy`` run on the same Python version.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: ansible-core 2.19 and pyinfra 3.10 are the anchors named in issue 6.
REQUIREMENTS = ("ansible-core==2.19.14", "pyinfra==3.10.0")
INSTALL_TIMEOUT = 900.0


class ToolchainError(RuntimeError):
    """The venv could not be built; the message carries pip's last line."""


@dataclass(frozen=True)
class Toolchain:
    """Paths to the anchors' entry points in the cached venv."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def ansible_playbook(self) -> Path:
        return self.root / "bin" / "ansible-playbook"

    @property
    def pyinfra(self) -> Path:
        return self.root / "bin" / "pyinfra"

    def version(self, distribution: str) -> str:
        """The installed version of ``distribution`` in the venv (read without importing it)."""
        proc = subprocess.run(
            [
                str(self.python),
                "-c",
                "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))",
                distribution,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return proc.stdout.strip() or "?"


def default_root() -> Path:
    """``$XDG_CACHE_HOME/deploy/bench-venv`` (``~/.cache/deploy/bench-venv``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "deploy" / "bench-venv"


def ensure(root: Path | None = None, log: Callable[[str], None] = print) -> Toolchain:
    """The venv at ``root``, created and filled from PyPI the first time.

    A half-built venv (interrupted install) has no stamp and is rebuilt from scratch.

    Raises:
        ToolchainError: venv creation or ``pip install`` failed (no network to PyPI?).
    """
    tools = Toolchain(root or default_root())
    stamp = tools.root / "bench-requirements.txt"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if stamp.exists() and stamp.read_text() == wanted and tools.ansible_playbook.exists():
        return tools
    log(f"bench: building {tools.root} with {' '.join(REQUIREMENTS)} (once per machine)")
    shutil.rmtree(tools.root, ignore_errors=True)
    tools.root.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(tools.root)],
        [
            str(tools.python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *REQUIREMENTS,
        ],
    ]
    for argv in steps:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
        )
        if proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines() or ["no output"]
            raise ToolchainError(f"`{' '.join(argv[:4])} ...` failed: {lines[-1]}")
    stamp.write_text(wanted)
    return tools
