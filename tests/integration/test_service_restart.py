"""A restart keeps the operator's server, over real sshd with the stand-in (issue 12: 1-4, 6).

What runs afterwards is read from the kernel (/proc: the listener's command line, environment
and listening addresses), not from deploy's report.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.integration.conftest import QUICK_HEALTH, Deploy, sha256

EAGLE3 = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "lightseek/kimi-k2.5-eagle3-standin",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
OPERATOR_ARGS = [
    "--host",
    "0.0.0.0",
    "--mem-fraction-static",
    "0.85",
    "--served-model-name",
    "kimi",
]
SECRET = "hf_s3cr3t_value_never_printed"
OPERATOR_ENV = {
    "HF_TOKEN": SECRET,
    "HF_HOME": "/models/hf",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
}


def report(stdout: str) -> dict[str, Any]:
    return dict(json.loads(stdout))


def step(host: dict[str, Any], kind: str) -> dict[str, Any]:
    return dict(next(s for s in host["steps"] if s["kind"] == kind))


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(part.split("=", 1) for part in raw.decode().split("\0") if "=" in part)


def listen_addresses(port: int) -> set[str]:
    """Local addresses (IPv4 hex as in /proc/net/tcp) listening on ``port``."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        address, _, hex_port = cols[1].partition(":")
        if cols[3] == "0A" and int(hex_port, 16) == port:
            found.add({"00000000": "0.0.0.0", "0100007F": "127.0.0.1"}.get(address, address))
    return found


def serve_by_hand(gpu: GpuHost, **command: Any) -> int:
    gpu_host.start_old_server(gpu, **command)
    pid = listener_pid(gpu.port)
    assert pid is not None
    return pid


def test_hand_started_server_comes_back_with_its_host_and_env_plus_eagle3(
    make_gpu_hosts: Any,
) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    old_pid = serve_by_hand(gpu, extra_args=OPERATOR_ARGS, env=OPERATOR_ENV)
    old_command = listener_cmdline(gpu.port)
    assert listen_addresses(gpu.port) == {"0.0.0.0"}

    check = deploy("apply", "kimi-eagle3", "--check")
    assert check.exit_code == 0, check.output
    assert "+  --speculative-algorithm EAGLE3" in check.stdout, "old -> new shown as a diff"
    assert "   --host 0.0.0.0" in check.stdout
    assert SECRET not in check.output
    assert listener_pid(gpu.port) == old_pid, "--check touches nothing"

    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    host = report(result.stdout)["hosts"][0]
    assert "drained in" in step(host, "restart")["summary"]
    assert "server environment unchanged" in step(host, "restart")["diff"]
    assert f"listens on 0.0.0.0:{gpu.port} as before" in step(host, "wait_healthy")["summary"]

    new_pid = listener_pid(gpu.port)
    assert new_pid is not None and new_pid != old_pid
    new_command = listener_cmdline(gpu.port)
    assert old_command is not None and new_command == old_command + EAGLE3
    env = environ(new_pid)
    assert {k: env.get(k) for k in OPERATOR_ENV} == OPERATOR_ENV
    assert env["PYTHONPATH"] == str(gpu.python_path)
    assert listen_addresses(gpu.port) == {"0.0.0.0"}
    assert os.readlink(f"/proc/{new_pid}/cwd") == str(gpu.ssh.root)


def test_0510_file_with_a_plain_server_is_restarted(make_gpu_hosts: Any) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.10"])
    gpu = gpus[0]
    before = sha256(gpu.model_file)
    old_pid = serve_by_hand(gpu)
    check = deploy("apply", "kimi-eagle3", "--check", "--json")
    assert check.exit_code == 0, check.output
    planned = report(check.stdout)["hosts"][0]
    assert planned["outcome"] == "would change", "--check reports the pending restart"
    assert step(planned, "restart")["status"] == "would change"
    assert listener_pid(gpu.port) == old_pid
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "changed" and host["changed_files"] == []
    assert step(host, "restart")["status"] == "ok"
    assert "the running server differs from the desired one" in step(host, "restart")["summary"]
    assert sha256(gpu.model_file) == before
    assert listener_pid(gpu.port) != old_pid
    assert "EAGLE3" in (listener_cmdline(gpu.port) or [])


def test_0510_already_running_eagle3_is_untouched(make_gpu_hosts: Any) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.10"])
    gpu = gpus[0]
    # The operator's spelling differs (--tp=2, --speculative-algo=EAGLE3): the same server.
    spelled = [
        "--speculative-algo=EAGLE3",
        *EAGLE3[2:],
    ]
    old_pid = serve_by_hand(gpu, extra_args=spelled)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "unchanged"
    assert step(host, "restart")["status"] == "unchanged"
    assert listener_pid(gpu.port) == old_pid


def test_a_server_importing_another_sglang_is_refused_before_anything(
    make_gpu_hosts: Any,
) -> None:
    """pip-installed sglang in site-packages beside the edited checkout: patching the checkout
    would change nothing the server loads."""
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    site = gpu.ssh.root / "venv" / "lib" / "python3" / "site-packages"
    shutil.copytree(gpu.python_path / "sglang", site / "sglang")
    old_pid = serve_by_hand(gpu, python_path=site)
    before = sha256(gpu.model_file)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "failed"
    error = host["error"]
    assert str(site / "sglang" / "srt" / "models" / "kimi_k25.py") in error
    assert str(gpu.model_file) in error
    assert "nothing was stopped or changed" in error
    assert sha256(gpu.model_file) == before
    assert listener_pid(gpu.port) == old_pid
    assert all(s["status"] == "not run" for s in host["steps"] if s["kind"] != "restart")


RESTART_ONLY = """
name: restart-only
hosts: all
services:
  sglang:
    command: unused
    port: "{{ sglang_port }}"
    gpus: all
    nvidia_smi: "{{ nvidia_smi }}"
steps:
  - restart:
      service: sglang
      args: {set: {--speculative-algorithm: EAGLE3, --speculative-draft-model-path: draft}}
  - wait_healthy: {service: sglang, timeout: 60}
"""


def test_a_request_in_flight_when_the_restart_begins_gets_its_200(
    make_gpu_hosts: Any, tmp_path: Path
) -> None:
    """The restart comes while a generation runs (a playbook with nothing before the restart,
    so that it surely does): the old server finishes it before it is stopped."""
    gpus, deploy = make_gpu_hosts(["0.5.10"])
    gpu = gpus[0]
    serve_by_hand(gpu)
    playbook = tmp_path / "restart-only.yaml"
    playbook.write_text(RESTART_ONLY)
    # 45 s at the stand-in's 160 tok/s: still running when the stop comes, even on a loaded
    # machine where the checks before the stop (the server's parser) take seconds.
    tokens = 7200
    answer: dict[str, Any] = {}

    def generate() -> None:
        body = json.dumps({"text": "A long story", "sampling_params": {"max_new_tokens": tokens}})
        request = urllib.request.Request(
            f"http://127.0.0.1:{gpu.port}/generate",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=180) as reply:
                answer["status"] = reply.status
                answer["tokens"] = json.loads(reply.read())["meta_info"]["completion_tokens"]
        except OSError as exc:
            answer["error"] = repr(exc)

    client = threading.Thread(target=generate)
    client.start()
    time.sleep(0.3)
    log = tmp_path / "run.log"
    result = deploy("apply", str(playbook), "--yes", "--json", "--log-file", str(log), timeout=240)
    client.join(180)
    assert result.exit_code == 0, result.output
    old_log = (gpu.ssh.root / "manual-sglang.log").read_text()
    assert "Gracefully exiting... Remaining number of requests: 1." in old_log, "in flight"
    assert answer == {"status": 200, "tokens": tokens}
    restart = step(report(result.stdout)["hosts"][0], "restart")["summary"]
    drained = re.search(r"drained in ([0-9.]+) s", restart)
    assert drained and float(drained.group(1)) > 1.0, restart
    # said while it drained: the request still in flight, from the server's /get_load
    progress = log.read_text()
    assert re.search(
        r"draining sglang \(pid \d+\): \d+ s of at most 300 s, 1 in flight", progress
    ), progress
    assert "EAGLE3" in (listener_cmdline(gpu.port) or [])


def test_a_new_server_that_no_longer_listens_where_the_old_one_did_is_rolled_back(
    make_gpu_hosts: Any,
) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    serve_by_hand(gpu, extra_args=["--host", "0.0.0.0"])
    old_command = listener_cmdline(gpu.port)
    before = sha256(gpu.model_file)
    gpu.configure(bind_host="127.0.0.1")  # the new server binds loopback only
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back"
    assert f"now listens on 127.0.0.1:{gpu.port}, not on 0.0.0.0:{gpu.port}" in host["error"]
    assert sha256(gpu.model_file) == before
    assert listener_cmdline(gpu.port) == old_command


FROM_TEMPLATE = """
name: from-template
hosts: all
services:
  sglang:
    command: >-
      {{ sglang_python | quote }} -m sglang.launch_server --model-path m --port {{ sglang_port }}
    python: "{{ sglang_python }}"
    env: {PYTHONPATH: "{{ sglang_pythonpath }}"}
    port: "{{ sglang_port }}"
steps:
  - restart:
      service: sglang
      only_if_changed: false
      imports: {sglang.srt.models.kimi_k25: "{{ model_file }}"}
  - wait_healthy: {service: sglang, timeout: 30}
"""


def test_an_empty_templated_pythonpath_keeps_the_inherited_one(
    sshd_sandbox: Any, tmp_path: Path
) -> None:
    """No server runs: the template starts it. sglang is importable only through the
    PYTHONPATH every session inherits; the playbook's "" must not wipe it."""
    python_path = sshd_sandbox.base / "gpu-1" / "root" / "sglang" / "python"
    host = sshd_sandbox.start("gpu-1", env={"PYTHONPATH": str(python_path)})
    gpu = gpu_host.prepare(host, "0.5.9", **QUICK_HEALTH)
    assert gpu.python_path == python_path
    workdir = tmp_path / "workstation"
    workdir.mkdir()
    (workdir / "template.yaml").write_text(FROM_TEMPLATE)
    inventory = sshd_sandbox.write_inventory(
        workdir / "hosts.yaml", [host], host_vars={host.name: {**gpu.vars, "sglang_pythonpath": ""}}
    )
    result = Deploy(workdir, inventory)("apply", "template.yaml", "--yes", "--json")
    assert result.exit_code == 0, result.output
    pid = listener_pid(gpu.port)
    assert pid is not None and environ(pid)["PYTHONPATH"] == str(python_path)
