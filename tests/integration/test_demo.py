"""`deploy demo` runs the whole story non-interactively and cleans up after itself (issue 7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.integration.conftest import REPO


def _sshd_pids() -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if b"deploy-demo-" in handle.read():
                        pids.add(int(entry))
            except OSError:
                continue
    return pids


def test_demo_runs_end_to_end_and_cleans_up() -> None:
    before = _sshd_pids()
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "demo"],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # Act 2: plan with the diff, then the run with restart, health, smoke and gate figures.
    assert "+    def set_eagle3_layers_to_capture(" in out
    assert "healthy after" in out
    assert re.search(r"concurrency 1: [0-9.]+ tok/s vs [0-9.]+ before \(x", out), out
    assert re.search(r"concurrency 4: [0-9.]+ tok/s vs [0-9.]+ before \(x", out), out
    # Act 3: the classic mistake is caught and undone; the server never stopped.
    assert "defined at module level" in out
    assert "file byte-identical to before the mistake: True; server untouched: True" in out
    # Act 4: history and rollback with the old server back.
    assert "kimi-eagle3-naive-append" in out and "old server" in out
    assert "demo: every act ended as expected." in out
    assert _sshd_pids() <= before, "every daemon and server the demo started is gone"
