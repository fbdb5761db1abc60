"""Which ``deploy`` the bench runs: this checkout's, and optionally an older build beside it.

``--baseline-ref REV`` adds a contestant, ``deploy@REV``: a detached git worktree of REV
(created under the bench's temporary directory and removed afterwards), byte-compiled like the
checkout, and run as ``python -m deploy.cli`` with ``PYTHONPATH`` on that worktree, so the same
interpreter and the same installed libraries run both. Both builds are then measured in the
same rounds, tool after tool: "no worse than before" (issue 16) is a ratio of one run, not of
two runs made on differently loaded minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.fleet import Fleet
from bench.tools import Command, DeployTool
from bench.workload import PLAYBOOK

REPO = Path(__file__).resolve().parents[1]
#: The baseline build's name among the tools (results, ratios, the plot).
BASELINE = "deploy-baseline"


def deploy_executable() -> list[str]:
    """The installed ``deploy`` console script beside this interpreter, as operators run it;
    ``python -m deploy.cli`` if it is not installed."""
    script = Path(sys.executable).parent / "deploy"
    return [str(script)] if script.exists() else [sys.executable, "-m", "deploy.cli"]


def ensure_bytecode(root: Path = REPO) -> str:
    """Compile ``root``'s deploy modules to bytecode, as ``pip install`` would have (untimed).

    An editable install (``pip install -e .``) leaves the sources uncompiled, and where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) nothing is ever cached: every
    ``deploy`` process then compiles its ~70 modules from source, ~40 ms that no installed copy
    pays — while the anchors in their venv were byte-compiled by pip. Measuring installed
    tools against installed tools is the only fair comparison.
    """
    package = root / "deploy"
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return f"`deploy`'s modules were byte-compiled before timing (`python -m compileall {package.relative_to(root)}`), as `pip install` does for the anchors"


class BaselineError(Exception):
    """The baseline revision could not be checked out."""


def baseline_worktree(ref: str, where: Path) -> Path:
    """A detached worktree of ``ref`` at ``where``, byte-compiled; `remove_worktree` ends it.

    Raises:
        BaselineError: ``ref`` is not a revision of this repository, or git failed.
    """
    proc = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BaselineError(f"--baseline-ref {ref}: {proc.stderr.strip() or 'git failed'}")
    ensure_bytecode(where)
    return where


def remove_worktree(where: Path) -> None:
    """Remove the baseline's worktree and its git bookkeeping (best effort)."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)],
        capture_output=True,
        check=False,
    )


def baseline_playbook(where: Path, playbook: Path) -> Path:
    """The baseline's own copy of ``playbook`` (same path in its worktree), else ``playbook``.

    Today's playbook may use settings an older build rejects (kimi-eagle3's ``unit_dir``: exit
    2 in 0.3 s, every run), so each build runs the playbook of its own revision."""
    try:
        own = where / playbook.absolute().relative_to(REPO)
    except ValueError:
        return playbook
    return own if own.is_file() else playbook


def baseline_tool(where: Path, playbook: Path) -> DeployTool:
    """The baseline build as a contestant: `DeployTool` with the worktree on ``PYTHONPATH``,
    running its own revision's playbook (`baseline_playbook`)."""
    playbook = baseline_playbook(where, playbook)

    class BaselineDeployTool(DeployTool):
        name = BASELINE

        def command(self, fleet: Fleet, forks: int) -> Command:
            plain = super().command(fleet, forks)
            # The playbook by path: by name, the fleet's workdir would find today's.
            argv = [str(playbook) if word == PLAYBOOK else word for word in plain.argv]
            return Command(argv, plain.cwd, {**plain.env, "PYTHONPATH": str(where)})

    return BaselineDeployTool([sys.executable, "-m", "deploy.cli"], playbook)
