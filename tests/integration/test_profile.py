"""The profiler (`bench/profile.py`) hears every span `deploy.trace` documents, on a real run.

The bench no longer wraps deploy's functions by name: deploy emits spans at its own wire and
phase boundaries and the profiler subscribes. This run on a sandbox host is what fails when
a hooked point is renamed or its hook removed (a documented span that never fires), or when
the profiler labels a span name deploy does not document.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from bench import profile
from deploy import trace
from tests.integration.conftest import REPO, Deploy, KimiHost

pytestmark = pytest.mark.ssh


def _profile(deploy: Deploy, *command: str) -> subprocess.CompletedProcess[str]:
    """``python -m bench.profile WORKDIR COMMAND...``, as the bench runs it, from the repo."""
    return subprocess.run(
        [sys.executable, "-m", "bench.profile", str(deploy.workdir), *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_profiler_records_every_documented_span_of_a_change_run(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    before = kimi.model_file.read_bytes()
    command = ["apply", "kimi-eagle3", "--yes", "--skip-tags", "service"]
    command += ["-i", str(deploy.inventory)]
    proc = _profile(deploy, *command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads(proc.stdout)
    assert kimi.model_file.read_bytes() != before  # a real change run, not a no-op
    # The change run sends its only command, the compile check, with the commit (host.check):
    # a command waited for on its own (host.run) comes from --check's compile of the plan.
    checked = _profile(deploy, *command, "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    seen = set(document["trace"]) | set(json.loads(checked.stdout)["trace"])
    assert seen == set(trace.SPANS), "a documented span never fired"
    labels = {label for _, label, _, _ in document["spans"]}
    assert "step python_insert: plan" in labels and "lock: exec until READY" in labels
    assert document["wire"]["channel opened"] >= 1  # paramiko's public API, counted
    host_spans = [s for s in document["spans"] if s[0] != "MainThread"]
    assert host_spans and all(s[2] <= s[3] for s in host_spans)


def test_profiler_labels_only_documented_spans() -> None:
    assert set(profile.LABELS) <= set(trace.SPANS)
