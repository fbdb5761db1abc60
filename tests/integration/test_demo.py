"""`deploy demo` runs the whole story non-interactively and cleans up after itself (issue 7)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import REPO


def _pids_under(base: Path) -> set[int]:
    """Processes whose command line names a path in ``base``: the kept host's sshd, say.

    Only this demo's directory counts: another `deploy demo` on the machine (a second worker,
    or someone else's test run on a shared machine) has its own.
    """
    needle = f"{base}/".encode()
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if needle in handle.read():
                        pids.add(int(entry))
            except OSError:
                continue
    return pids


def test_demo_runs_end_to_end_keeps_the_host_and_cleans_up() -> None:
    """``--keep`` returns the prompt with the host up; its export line works; ``--stop`` ends it."""
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "demo", "--keep"],
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
    assert re.search(r"concurrency 32: [0-9.]+ tok/s vs [0-9.]+ before \(x", out), out
    # Act 3: the classic mistake is caught and undone; the server never stopped.
    assert "defined at module level" in out
    assert "file byte-identical to before the mistake: True; server untouched: True" in out
    # Act 4: history and rollback with the old server back.
    assert "kimi-eagle3-naive-append" in out and "old server" in out
    assert "demo: every act ended as expected." not in out, "still running: it has not ended"
    # Printed once each: the plan's diff (--check), the serving command in full, not cut.
    assert out.count("+    def set_eagle3_layers_to_capture(") == 1, out
    serving = next(line for line in out.splitlines() if "now serving:" in line)
    assert "--speculative-draft-model-path lightseek/kimi-k2.5-eagle3-standin " in serving
    assert serving.endswith("--speculative-num-draft-tokens 4"), serving
    # The export line is a command: a shell that runs it reaches the kept host and its history.
    export = next(line.strip() for line in out.splitlines() if line.strip().startswith("export "))
    exported = dict(pair.split("=", 1) for pair in shlex.split(export)[1:])
    base = Path(exported["XDG_STATE_HOME"]).parent  # the demo's own directory
    assert base.name.startswith("deploy-demo-"), export
    script = f"{export}; {shlex.quote(sys.executable)} -m deploy.cli history; " + (
        f"{shlex.quote(sys.executable)} -m deploy.cli apply kimi-eagle3 --check "
        "--detailed-exitcode --skip-tags service"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DEPLOY_INVENTORY", "XDG_STATE_HOME")}
    used = subprocess.run(
        ["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, env=env
    )
    assert "kimi-eagle3-naive-append" in used.stdout, used.stdout + used.stderr
    # The rollback put 0.5.9's file back: the patch is pending again, which is drift: exit 5.
    assert used.returncode == 5, used.stdout + used.stderr
    assert "1 host(s) would change" in used.stdout
    assert _pids_under(base), "the kept host is still running"

    stop = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "demo", "--stop"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stop.returncode == 0 and "stopped the demo" in stop.stdout, stop.stdout + stop.stderr
    assert not _pids_under(base), "every daemon and server the demo started is gone"
