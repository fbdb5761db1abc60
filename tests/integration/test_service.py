"""SGLang service lifecycle over real sshd with the stand-in server (issue 3).

Each test starts from a host where an operator launched SGLang by hand (no EAGLE-3), exactly as
today, and checks what is running afterwards by asking the kernel which process listens on the
port — not by trusting deploy's report.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import time
from pathlib import Path

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.integration.conftest import Deploy, sha256

EAGLE3_FLAG = "--speculative-algorithm"
NAIVE_WITH_RESTART = """
name: naive-with-restart
hosts: all
services:
  sglang:
    command: >-
      {{ sglang_python | quote }} -m sglang.launch_server --model-path {{ model_path | quote }}
      --tp {{ tp }} --port {{ sglang_port }} --speculative-algorithm EAGLE3
      --speculative-draft-model-path {{ draft_model_path | quote }}
    cwd: "{{ sglang_cwd }}"
    env: {PYTHONPATH: "{{ sglang_pythonpath }}"}
    port: "{{ sglang_port }}"
    gpus: all
    nvidia_smi: "{{ nvidia_smi }}"
steps:
  - append:
      path: "{{ model_file }}"
      text: |

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.language_model.set_eagle3_layers_to_capture(layer_ids)
  - restart:
      service: sglang
      args: {set: {--speculative-algorithm: EAGLE3, --speculative-draft-model-path: draft}}
  - wait_healthy: {service: sglang, timeout: 30}
"""


def report(result_stdout: str) -> dict:  # type: ignore[type-arg]
    return json.loads(result_stdout)


def step(host_report: dict, kind: str) -> dict:  # type: ignore[type-arg]
    return next(s for s in host_report["steps"] if s["kind"] == kind)


def test_full_apply_patches_restarts_and_passes_the_gate(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    old_command = listener_cmdline(gpu.port)
    assert old_command and EAGLE3_FLAG not in old_command

    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "changed"
    gate = step(host, "gate_throughput")["figures"]
    assert gate["tokens_per_s"] > gate["before_tokens_per_s"] > 0 and gate["ratio"] >= 1.0
    assert step(host, "wait_healthy")["figures"]["ready_s"] > 0
    assert step(host, "smoke")["figures"]["smoke_tokens"] > 0
    restart = step(host, "restart")["summary"]
    assert "stopped pid" in restart and "port" in restart and "GPUs released" in restart

    new_command = listener_cmdline(gpu.port)
    assert new_command and EAGLE3_FLAG in new_command
    tree = ast.parse(gpu.model_file.read_bytes())
    cls = next(
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration"
    )
    assert {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"} <= {
        n.name for n in cls.body if isinstance(n, ast.FunctionDef)
    }

    # A re-run on the patched host changes nothing and restarts nothing.
    pid_before = _listener_pid(gpu.port)
    again = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert again.exit_code == 0, again.output
    host = report(again.stdout)["hosts"][0]
    assert host["outcome"] == "unchanged"
    assert step(host, "restart")["status"] == "unchanged"
    assert "already runs as desired" in step(host, "restart")["summary"]
    assert _listener_pid(gpu.port) == pid_before

    # deploy rollback restores the file AND restarts the old server with its own command line.
    original = gpu_host.kimi_k25_source("0.5.9")
    rolled = deploy("rollback", "--yes")
    assert rolled.exit_code == 0, rolled.output
    assert gpu.model_file.read_bytes() == original
    assert listener_cmdline(gpu.port) == old_command
    assert "old server" in rolled.stdout and "healthy" in rolled.stdout


def test_naive_append_with_restart_dies_and_the_old_server_comes_back(
    serving_059: tuple[GpuHost, Deploy], tmp_path: Path
) -> None:
    gpu, deploy = serving_059
    before = sha256(gpu.model_file)
    old_command = listener_cmdline(gpu.port)
    playbook = tmp_path / "naive.yaml"
    playbook.write_text(NAIVE_WITH_RESTART)
    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back"
    assert "object has no attribute 'set_eagle3_layers_to_capture'" in host["error"]
    assert "exited" in host["error"]
    assert sha256(gpu.model_file) == before
    assert listener_cmdline(gpu.port) == old_command
    assert any("old server" in line and "healthy" in line for line in host["rollback"])


def test_gate_failure_rolls_back_to_the_hand_started_server(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    gpu.configure(eagle3_tokens_per_s=80.0)  # EAGLE-3 slower than without (the CUDA 12 story)
    old_command = listener_cmdline(gpu.port)
    before = sha256(gpu.model_file)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back"
    gate = step(host, "gate_throughput")
    assert gate["status"] == "failed" and "throughput gate failed" in gate["summary"]
    assert sha256(gpu.model_file) == before
    assert listener_cmdline(gpu.port) == old_command, "the adopted server's own command line"


def test_health_timeout_reports_the_log_tail(serving_059: tuple[GpuHost, Deploy]) -> None:
    gpu, deploy = serving_059
    gpu.configure(eagle3_load_seconds=30.0)  # the new (EAGLE-3) server loads for too long
    old_command = listener_cmdline(gpu.port)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", "-e", "sglang_ready_timeout=2")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back"
    assert "not healthy after 2 s (last: connection refused)" in host["error"]
    assert "Load weight begin" in host["error"], "the server's log tail is in the report"
    assert listener_cmdline(gpu.port) == old_command


def test_orphaned_scheduler_holding_the_port_is_reaped(make_gpu_hosts) -> None:  # type: ignore[no-untyped-def]
    gpus, deploy = make_gpu_hosts(["0.5.9"], orphan_scheduler=True)
    gpu = gpus[0]
    gpu_host.start_old_server(gpu)
    gpu.configure(orphan_scheduler=False)
    # The server sends its listening socket to the schedulers once bound; on a loaded machine
    # they may not have it yet when it first answers healthy: wait until one holds it too.
    deadline = time.monotonic() + 10
    while len(gpu_host.listener_pids(gpu.port)) < 2:
        assert time.monotonic() < deadline, "no scheduler took the listening socket"
        time.sleep(0.05)
    # The server dies the way SGLang does: its scheduler survives and keeps the port.
    os.kill(_listener_pid(gpu.port, leader=True), signal.SIGKILL)
    holder = listener_cmdline(gpu.port)
    assert holder and holder[0].startswith("sglang::scheduler_TP")
    # no server to measure before the change: the gate judges by the operator's floor
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", "-e", "sglang_min_tokens_per_s=100")
    assert result.exit_code == 0, result.output
    restart = step(report(result.stdout)["hosts"][0], "restart")["summary"]
    assert "reaped sglang::scheduler_TP" in restart
    assert EAGLE3_FLAG in (listener_cmdline(gpu.port) or [])


def test_a_stranger_on_the_port_is_not_stopped_without_force(make_gpu_hosts) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    stranger = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(gpu.port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        gpu_host_wait_listen(gpu.port)
        before = sha256(gpu.model_file)
        result = deploy("apply", "kimi-eagle3", "--yes")
        assert result.exit_code == 1, result.output
        assert "not sglang.launch_server" in result.output and "--force" in result.output
        assert stranger.poll() is None, "the stranger is still running"
        assert sha256(gpu.model_file) == before
    finally:
        stranger.kill()
        stranger.wait()


def test_skip_tags_service_changes_only_the_file(serving_059: tuple[GpuHost, Deploy]) -> None:
    gpu, deploy = serving_059
    pid = _listener_pid(gpu.port)
    result = deploy("apply", "kimi-eagle3", "--yes", "--skip-tags", "service")
    assert result.exit_code == 0, result.output
    assert _listener_pid(gpu.port) == pid
    assert b"def set_eagle3_layers_to_capture" in gpu.model_file.read_bytes()


def gpu_host_wait_listen(port: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while listener_cmdline(port) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _listener_pid(port: int, leader: bool = False) -> int:
    """pid of the process listening on ``port`` (with ``leader``: its process-group leader)."""
    pid = listener_pid(port)
    assert pid is not None, f"nothing listens on {port}"
    return os.getpgid(pid) if leader else pid
