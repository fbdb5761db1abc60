"""The ``systemd`` service manager end to end, against a stand-in ``systemctl`` (issue 3).

This machine has no systemd as init, so the sandbox host gets a ``systemctl``/``journalctl``
pair first on its PATH that runs the stand-in SGLang server as a "unit". Deploy drives it
exactly as it drives the real one: ``is-active``, ``show -p MainPID``, ``stop``, ``start``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import listener_cmdline
from deploy.sandbox.sshd import SshdSandbox
from tests.integration.conftest import QUICK_HEALTH, REPO, Deploy, sha256

FAKE = REPO / "deploy" / "sandbox" / "fake_systemd"

PLAYBOOK = """
name: kimi-eagle3-systemd
hosts: all
services:
  sglang:
    manager: systemd
    unit: sglang.service
    port: "{{ sglang_port }}"
steps:
  - python_insert:
      path: "{{ model_file }}"
      class: KimiK25ForConditionalGeneration
      code: |
        def get_embed_and_head(self):
            return self.language_model.get_embed_and_head()
  - restart: {service: sglang}
  - wait_healthy: {service: sglang, timeout: 30}
  - smoke: {service: sglang}
  - gate_throughput: {service: sglang, baseline: before, min_ratio: 0.5, min_tokens_per_s: 100000}
"""


def test_systemd_unit_restarted_then_rolled_back(sshd_sandbox: SshdSandbox, tmp_path: Path) -> None:
    root = sshd_sandbox.base / "gpu-1" / "root"
    bin_dir = root / "bin"
    host = sshd_sandbox.start("gpu-1", env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"})
    gpu = gpu_host.prepare(host, "0.5.9", **QUICK_HEALTH)
    for tool in ("systemctl", "journalctl"):
        shutil.copy2(FAKE / tool, bin_dir / tool)
    units = root / "etc" / "systemd"
    units.mkdir(parents=True)
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--port",
        str(gpu.port),
    ]
    (units / "sglang.service.json").write_text(
        json.dumps(
            {
                "argv": argv,
                "env": {"PYTHONPATH": str(gpu.python_path)},
                "cwd": str(root),
                "log": str(root / "unit.log"),
            }
        )
    )
    playbook = tmp_path / "systemd.yaml"
    playbook.write_text(PLAYBOOK)
    workdir = tmp_path / "ws"
    workdir.mkdir()
    inventory = sshd_sandbox.write_inventory(
        workdir / "hosts.yaml", [host], host_vars={"gpu-1": gpu.vars}
    )
    deploy = Deploy(workdir, inventory)
    assert deploy("status").exit_code in (0, 4)  # reachable; the unit is not started yet
    start = deploy("apply", str(playbook), "--check")
    assert start.exit_code == 0, start.output

    # Start the unit as systemd would at boot, then deploy: the unreachable floor fails the gate.
    import subprocess

    subprocess.run(
        [str(bin_dir / "systemctl"), "start", "sglang.service"],
        check=True,
        env={**os.environ, "FAKE_SYSTEMD_DIR": str(units)},
    )
    gpu_host.wait_healthy(gpu.port)
    before_pid = int((units / "sglang.service.pid").read_text())
    before = sha256(gpu.model_file)
    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 1, result.output
    host_report = json.loads(result.stdout)["hosts"][0]
    assert host_report["outcome"] == "rolled back", host_report
    restart = next(s for s in host_report["steps"] if s["kind"] == "restart")
    assert "systemctl stop sglang.service" in restart["summary"]
    assert next(s for s in host_report["steps"] if s["kind"] == "wait_healthy")["status"] == "ok"
    gate = next(s for s in host_report["steps"] if s["kind"] == "gate_throughput")
    assert gate["status"] == "failed" and "below the floor" in gate["summary"]
    # Undo: file back, unit started again and healthy, as a new main process.
    assert sha256(gpu.model_file) == before
    assert any("old server" in line and "healthy" in line for line in host_report["rollback"])
    after_pid = int((units / "sglang.service.pid").read_text())
    assert after_pid != before_pid
    assert listener_cmdline(gpu.port) == argv
