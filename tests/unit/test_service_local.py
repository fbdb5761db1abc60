"""Restart, health, smoke and throughput gate on a `LocalHost`, with the stand-in SGLang server.

The stand-in (`deploy/sandbox/fake_sglang`) is a real process on this machine: started "by
hand" as an operator would, then restarted by the kimi-eagle3 playbook with EAGLE-3, checked
healthy through `Host.http` (a local socket here, a forwarded channel over SSH), and rolled
back to the operator's command line when a later step fails. What runs afterwards is read from
/proc, not from deploy's report.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from deploy.engine.status import sglang_health
from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.unit.local_rig import LocalRig

KIMI = Path(__file__).resolve().parents[2] / "playbooks" / "kimi-eagle3.yaml"


def kimi_without_gate(rig: LocalRig, *, then: list[dict[str, Any]] = ()) -> Path:  # type: ignore[assignment]
    """kimi-eagle3 as shipped, minus its throughput gate (seconds of measuring: the
    integration suite's test_service_gate covers it), health polled every 0.5 s (the least allowed), and
    ``then`` steps after the smoke test."""
    document = yaml.safe_load(KIMI.read_text())
    steps = [s for s in document["steps"] if "gate_throughput" not in s]
    for entry in steps:
        if "wait_healthy" in entry:
            entry["wait_healthy"]["interval"] = 0.5
    return rig.playbook(
        "kimi-fast", [*steps, *then], vars=document["vars"], services=document["services"]
    )


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[LocalRig, GpuHost]]:
    """SGLang 0.5.9's tree with the stand-in, its server started by hand and healthy."""
    rig = LocalRig(tmp_path / "host")
    # `prepare` lays the tree out under ``host.root``; a LocalHost's root is a plain directory.
    gpu = gpu_host.prepare(
        SimpleNamespace(root=rig.files),  # type: ignore[arg-type]
        "0.5.9",
        load_seconds=0.1,
        warmup_seconds=0.1,
    )
    rig.write_inventory(**gpu.vars)
    subprocess.run(["/bin/bash", "-c", gpu.old_server_command()], check=True, timeout=30)
    try:
        gpu_host.wait_healthy(gpu.port, 30)
        yield rig, gpu
    finally:
        pid = listener_pid(gpu.port)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_restart_with_eagle3_then_healthy(serving: tuple[LocalRig, GpuHost]) -> None:
    rig, gpu = serving
    before = listener_pid(gpu.port)
    run = rig.apply(kimi_without_gate(rig))
    (host,) = run.hosts
    assert run.exit_code == 0, [(s.kind, s.status, s.summary) for s in host.steps]
    statuses = {s.kind: s.status for s in host.steps}
    assert statuses["restart"] == "ok"
    assert statuses["wait_healthy"] == "ok" and statuses["smoke"] == "ok"
    after = listener_pid(gpu.port)
    assert after is not None and after != before, "a new server listens where the old one did"
    argv = listener_cmdline(gpu.port) or []
    assert "EAGLE3" in argv and "--speculative-num-draft-tokens" in argv
    assert b"def set_eagle3_layers_to_capture" in gpu.model_file.read_bytes()
    # `deploy status` asks the server through Host.http, as over SSH.
    assert rig.status(health=sglang_health).health == f"sglang: healthy on {gpu.port}"


def test_a_failure_after_the_restart_restores_file_and_old_server(
    serving: tuple[LocalRig, GpuHost],
) -> None:
    rig, gpu = serving
    original = gpu.model_file.read_bytes()
    old_argv = listener_cmdline(gpu.port)
    old_pid = listener_pid(gpu.port)
    failing = {"name": "A later check fails", "verify_command": {"run": "exit 7"}}
    run = rig.apply(kimi_without_gate(rig, then=[failing]))
    (host,) = run.hosts
    assert run.exit_code == 1, [(s.kind, s.status, s.summary) for s in host.steps]
    assert host.outcome == "rolled back"
    assert [s.kind for s in host.steps if s.status == "failed"] == ["verify_command"]
    assert gpu.model_file.read_bytes() == original
    assert listener_cmdline(gpu.port) == old_argv, "the operator's command line is back"
    assert listener_pid(gpu.port) not in (None, old_pid), "restarted, not left running"
    gpu_host.wait_healthy(gpu.port, 10)
    (run_id,) = rig.runs()
    journal = rig.journal(run_id)
    undone = [e.get("op") for e in journal if e["event"] == "undone"]
    assert sorted(undone) == ["service", "write"]
    assert journal[-1]["outcome"] == "rolled_back"
