"""The drift rule's "not by deploy" (issue 30): content deploy itself put back is no drift.

A run killed after its file write and before its restart is recovered by the next apply: the
recovery restores the original, so the file's mtime is after the running server's start. That
content is what the server loaded, put back by deploy's own journaled undo — the fault matrix
(`tests/faults/test_matrix_service.py`, kill "after files, before the restart", then apply)
found it refused as drift. Checked on `LocalHost` with real files and journals.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from deploy.services.prechecks import drift_problem
from deploy.services.state import ServiceState
from tests.unit.local_host import LocalHost


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _journal(state_dir: Path, run: str, records: list[dict[str, object]]) -> None:
    folder = state_dir / "runs" / run
    folder.mkdir(parents=True)
    (folder / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _intent(path: Path, before: bytes, after: bytes) -> dict[str, object]:
    return {
        "event": "intent", "op": "write", "step": 0, "path": str(path), "before": _sha(before),
        "after": _sha(after), "original": _sha(before), "mode": 0o644, "uid": 0, "gid": 0,
        "size": len(after),
    }  # fmt: skip


def _check(tmp_path: Path) -> tuple[Path, Path, ServiceState]:
    state_dir = tmp_path / "state"
    (state_dir / "runs").mkdir(parents=True)
    target = tmp_path / "model.py"
    target.write_bytes(b"original\n")
    server = ServiceState(running=True, pid=4242, started_at=time.time() - 60)
    return state_dir, target, server


def test_content_deploy_put_back_is_not_drift(tmp_path: Path) -> None:
    state_dir, target, server = _check(tmp_path)
    _journal(
        state_dir,
        "20261204T000000.000000Z-killed",
        [
            {"event": "begin", "run_id": "20261204T000000.000000Z-killed"},
            _intent(target, b"original\n", b"patched\n"),
            {"event": "undone", "op": "write", "action": "restored", "path": str(target)},
        ],
    )
    with LocalHost(home=str(tmp_path)) as host:
        assert drift_problem(host, str(state_dir), server, [str(target)]) is None


def test_content_nobody_recorded_is_drift(tmp_path: Path) -> None:
    state_dir, target, server = _check(tmp_path)
    # The same run, not undone: its "before" was never put back by deploy.
    _journal(
        state_dir,
        "20261204T000000.000000Z-open",
        [
            {"event": "begin", "run_id": "20261204T000000.000000Z-open"},
            _intent(target, b"original\n", b"patched\n"),
        ],
    )
    with LocalHost(home=str(tmp_path)) as host:
        problem = drift_problem(host, str(state_dir), server, [str(target)])
    assert problem is not None and problem.startswith(f"drift: {target} changed at"), problem
