"""The workstation's record of runs: ``$XDG_STATE_HOME/deploy/runs/<run-id>.json``.

The host keeps what is needed to undo; the workstation keeps what is needed to understand:
every run's full report (the JSON report of ``deploy apply --json``), for ``deploy history``
and ``deploy show``. Run ids start with the UTC time, so file names sort as the runs began.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from deploy import trace
from deploy.engine.results import RunResult
from deploy.engine.runid import check_run_id
from deploy.errors import InputError


def state_home() -> Path:
    """``$XDG_STATE_HOME/deploy`` (default ``~/.local/state/deploy``): runs, locks, reports."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "deploy"


def history_dir() -> Path:
    return state_home() / "runs"


def write_json_atomic(path: Path, document: object) -> Path:
    """Write ``document`` to ``path`` via a temp file and a rename: never a torn report.

    A reader (a monitoring job reading ``--report``, ``deploy history`` listing runs) sees
    the old file or the new one, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@trace.spanned("history.save")
def save(run: RunResult) -> Path:
    """Record the run's report and return its path."""
    return write_json_atomic(history_dir() / f"{run.run_id}.json", run.to_dict())


def load_all(host: str | None = None, inventory: Path | None = None) -> list[RunResult]:
    """Every recorded run, oldest first; unreadable files are skipped.

    ``host`` keeps only runs that involved that host (in any outcome, "skipped" included);
    ``inventory`` only runs of that inventory file (runs recorded before the inventory was
    recorded never match it).
    """
    wanted = str(inventory.resolve()) if inventory is not None else None
    runs: list[tuple[str, float, RunResult]] = []
    directory = history_dir()
    if not directory.is_dir():
        return []
    for path in directory.glob("*.json"):
        try:
            run = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
            written = path.stat().st_mtime
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if wanted is not None and run.inventory != wanted:
            continue
        if host is None or any(h.host == host for h in run.hosts):
            runs.append((run.started, written, run))
    # Run ids (and ``started``) have whole seconds; within one second, the order they ended.
    return [run for _, _, run in sorted(runs, key=lambda item: item[:2])]


def load(run_id: str) -> RunResult | None:
    """The run ``run_id``, or the one run whose id starts or ends with it; None if there is
    none.

    Raises:
        InputError: ``run_id`` is no run id (a path, say), or names several runs (listed).
    """
    check_run_id(run_id)
    directory = history_dir()
    exact = directory / f"{run_id}.json"
    if exact.is_file():
        return RunResult.from_dict(json.loads(exact.read_text(encoding="utf-8")))
    if not directory.is_dir():
        return None
    part = _glob_escape(run_id)
    matches = sorted(set(directory.glob(f"{part}*.json")) | set(directory.glob(f"*{part}.json")))
    if len(matches) > 1:
        names = ", ".join(p.stem for p in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise InputError(f"run id {run_id!r} is ambiguous: {names}")
    if not matches:
        return None
    return RunResult.from_dict(json.loads(matches[0].read_text(encoding="utf-8")))


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)
