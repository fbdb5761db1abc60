"""What the numbers were measured on: versions of every tool, the CPU, the date.

A timing without its versions and machine cannot be compared with anything, so the report
carries them all. ``deploy``'s version includes the commit and whether the tree was dirty,
since the benchmark is run on work in progress.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from bench.toolchain import Toolchain


def _output(argv: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = proc.stdout.strip() or proc.stderr.strip()
    return text.splitlines()[0] if text else ""


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def load_average() -> str:
    """The 1/5/15-minute load averages: a busy machine (other test suites running on the
    same cores) shows here, and explains noisy numbers."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def revision(repo: Path, ref: str) -> str:
    """The short commit hash of ``ref`` ("?" if git cannot say)."""
    return _output(["git", "rev-parse", "--short", ref], repo) or "?"


def describe(repo: Path, toolchain: Toolchain | None, load_at_start: str) -> dict[str, str]:
    """Versions and machine facts, as label -> text, in the order the report shows them."""
    commit = _output(["git", "rev-parse", "--short", "HEAD"], repo) or "?"
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"], repo)
    facts = {
        "date (UTC)": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cores ({cpu_model()}), {platform.system()} "
        f"{platform.release()}, loopback",
        "python": platform.python_version(),
        "deploy": f"{_version('deploy')} (commit {commit}{', tree modified' if dirty else ''})",
        "paramiko": _version("paramiko"),
        "fabric": _version("fabric"),
        "OpenSSH": _output(["ssh", "-V"]),
        "load average (1/5/15 min) at start": load_at_start,
        "load average (1/5/15 min) at end": load_average(),
    }
    if toolchain is not None:
        facts["ansible-core"] = toolchain.version("ansible-core")
        facts["pyinfra"] = toolchain.version("pyinfra")
        facts["paramiko (pyinfra's venv)"] = toolchain.version("paramiko")
    return facts
