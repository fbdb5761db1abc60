"""The workstation's record of runs: ``$XDG_STATE_HOME/deploy/runs/<run-id>.json``.

The host keeps what is needed to undo; the workstation keeps what is needed to understand:
every run's full report, for ``deploy history`` and ``deploy show``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from deploy.engine.results import RunResult


def history_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "deploy" / "runs"


def save(run: RunResult) -> Path:
    """Write the run's report atomically (temp file + rename) and return its path."""
    directory = history_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{run.run_id}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{run.run_id}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(run.to_dict(), handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    return target


def load_all(host: str | None = None) -> list[RunResult]:
    """Every recorded run, oldest first; unreadable files are skipped."""
    runs = []
    directory = history_dir()
    if not directory.is_dir():
        return []
    for path in sorted(directory.glob("*.json")):
        try:
            run = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, KeyError):
            continue
        if host is None or any(h.host == host for h in run.hosts):
            runs.append(run)
    return runs


def load(run_id: str) -> RunResult | None:
    path = history_dir() / f"{run_id}.json"
    if not path.exists():
        return None
    return RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
