"""kimi-eagle3 against a systemd unit's server, over real sshd (issues 3 and 31, point 2).

This machine has no systemd as init, so the sandbox host gets a ``systemctl``/``journalctl``
pair first on its PATH (`deploy/sandbox/fake_systemd`) that reads real unit files and drop-ins
as systemd does and runs the stand-in SGLang server as the unit. Where the host's cgroup v1
``name=systemd`` hierarchy is writable, the unit's processes are put in
``system.slice/.../sglang.service``, so deploy detects the unit from the server's real
``/proc/PID/cgroup`` (``sglang_manager`` left at its default, ``auto``); elsewhere the test
names the manager.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from deploy.sandbox.sshd import SshdSandbox
from tests.faults.attacker import ATTACKER_PYTHON, Attacker
from tests.integration.conftest import QUICK_HEALTH, REPO, Deploy
from tests.integration.test_service_runas import as_user

FAKE = REPO / "deploy" / "sandbox" / "fake_systemd"
CGROUP_ROOT = Path("/sys/fs/cgroup/systemd")
UNIT = "sglang.service"
DROPIN = "90-deploy.conf"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Unit:
    """A sandbox host whose SGLang runs as the systemd unit ``sglang.service``."""

    def __init__(self, sandbox: SshdSandbox, tmp_path: Path) -> None:
        self.root = sandbox.base / "gpu-1" / "root"
        bin_dir = self.root / "bin"
        self.host = sandbox.start("gpu-1", env={"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"})
        self.gpu: GpuHost = gpu_host.prepare(self.host, "0.5.9", **QUICK_HEALTH)
        for tool in ("systemctl", "journalctl"):
            shutil.copy2(FAKE / tool, bin_dir / tool)
        self.units = self.root / "etc" / "systemd"
        self.units.mkdir(parents=True)
        self.argv = [
            sys.executable, "-m", "sglang.launch_server", "--model-path",
            "nvidia/Kimi-K2.5-NVFP4", "--tp", "2", "--trust-remote-code", "--port",
            str(self.gpu.port),
        ]  # fmt: skip
        (self.units / UNIT).write_text(
            "[Unit]\nDescription=SGLang\n\n[Service]\n"
            f'Environment="PYTHONPATH={self.gpu.python_path}"\n'
            f"WorkingDirectory={self.root}\n"
            f"ExecStart={' '.join(self.argv[:4])} \\\n    {' '.join(self.argv[4:])}\n"
            f"StandardOutput=append:{self.root / 'unit.log'}\n"
            "TimeoutStopSec=30\n"
        )
        # The operator's own drop-in: deploy must never write it.
        self.dropins = self.units / f"{UNIT}.d"
        self.dropins.mkdir()
        (self.dropins / "override.conf").write_text('[Service]\nEnvironment="OPERATOR=1"\n')
        self.slice: Path | None = None
        if os.access(CGROUP_ROOT, os.W_OK):
            self.slice = CGROUP_ROOT / "system.slice" / f"deploy-test-{uuid.uuid4().hex[:8]}.slice"
            (self.units / "cgroup-root").write_text(str(self.slice))
        workdir = tmp_path / "ws"
        workdir.mkdir()
        (workdir / "playbooks").symlink_to(REPO / "playbooks")
        host_vars = {**self.gpu.vars, "sglang_unit_dir": str(self.units)}
        if self.slice is None:
            host_vars.update(sglang_manager="systemd", sglang_unit=UNIT)
        inventory = sandbox.write_inventory(
            workdir / "hosts.yaml", [self.host], host_vars={"gpu-1": host_vars}
        )
        self.deploy = Deploy(workdir, inventory)

    def systemctl(self, *args: str) -> None:
        env = {**os.environ, "FAKE_SYSTEMD_DIR": str(self.units)}
        subprocess.run([str(self.root / "bin" / "systemctl"), *args], check=True, env=env)

    def server_info(self) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.gpu.port}/server_info"
        with urllib.request.urlopen(url, timeout=10) as answer:
            info: dict[str, object] = json.loads(answer.read())
        return info

    def close(self) -> None:
        try:
            self.systemctl("stop", UNIT)
        finally:
            if self.slice is not None and self.slice.exists():
                for level in (self.slice / UNIT, self.slice):
                    if level.exists():
                        level.rmdir()


@pytest.fixture
def unit(sshd_sandbox: SshdSandbox, tmp_path: Path) -> Iterator[Unit]:
    made = Unit(sshd_sandbox, tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_kimi_eagle3_applies_through_a_dropin_and_rolls_back(unit: Unit) -> None:
    # deploy's drop-in from an earlier run: its change is kept, and put back byte for byte.
    earlier = '[Service]\nEnvironment="SGLANG_EARLIER=1"\n'
    (unit.dropins / DROPIN).write_text(earlier)
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    pid = listener_pid(unit.gpu.port)
    if unit.slice is not None:  # the real cgroup names the unit: what deploy detects
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        assert f"/{UNIT}" in cgroup, cgroup
    theirs = {p.name: digest(p) for p in (unit.units / UNIT, unit.dropins / "override.conf")}

    check = unit.deploy("apply", "kimi-eagle3", "--check")
    assert check.exit_code == 0, check.output
    assert "+ExecStart=" in check.output and "--speculative-algorithm EAGLE3" in check.output
    assert listener_pid(unit.gpu.port) == pid  # --check touched nothing

    result = unit.deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["hosts"][0]
    restart = next(s for s in report["steps"] if s["kind"] == "restart")
    assert "daemon-reload" in restart["summary"], restart
    # systemd's stop is the drain: its 30 s are said to be shorter than the 300 s bound.
    assert "TimeoutStopSec 30 s, shorter than the 300 s drain bound" in restart["summary"]
    # The restarted unit runs with the EAGLE-3 flags: its argv, and the server says so.
    argv = listener_cmdline(unit.gpu.port) or []
    assert argv[: len(unit.argv)] == unit.argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert unit.server_info()["speculative_algorithm"] == "EAGLE3"
    dropin = (unit.dropins / DROPIN).read_text()
    assert "ExecStart=\nExecStart=" in dropin and 'Environment="SGLANG_EARLIER=1"' in dropin
    assert {
        p.name: digest(p) for p in (unit.units / UNIT, unit.dropins / "override.conf")
    } == theirs
    # A later `systemctl restart` by the operator keeps the change: it is in the unit.
    unit.systemctl("restart", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    assert "--speculative-algorithm" in (listener_cmdline(unit.gpu.port) or [])

    back = unit.deploy("rollback", "--yes")
    assert back.exit_code == 0, back.output
    assert (unit.dropins / DROPIN).read_text() == earlier
    assert listener_cmdline(unit.gpu.port) == unit.argv
    assert unit.server_info().get("speculative_algorithm") in (None, "")
    assert {
        p.name: digest(p) for p in (unit.units / UNIT, unit.dropins / "override.conf")
    } == theirs


def test_rollback_removes_a_dropin_that_did_not_exist(unit: Unit) -> None:
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    result = unit.deploy("apply", "kimi-eagle3", "--yes")
    assert result.exit_code == 0, result.output
    assert (unit.dropins / DROPIN).exists()
    # A crash loop's worth of starts: systemd's start limit now refuses a plain start.
    # Six restarts in systemd's 10 s need each under 2 s: on a loaded machine (-n 8 on two
    # cores) they were not, so the limit's interval is an hour here.
    env = {
        **os.environ,
        "FAKE_SYSTEMD_DIR": str(unit.units),
        "FAKE_SYSTEMD_START_LIMIT_INTERVAL": "3600",
    }
    systemctl = [str(unit.root / "bin" / "systemctl")]
    for _ in range(5):
        subprocess.run([*systemctl, "restart", UNIT], env=env, check=False)
    limited = subprocess.run([*systemctl, "restart", UNIT], env=env, capture_output=True, text=True)
    assert limited.returncode != 0 and "start-limit-hit" in limited.stderr
    # The undo's `reset-failed` before its start: the limit cannot block the rollback.
    back = unit.deploy("rollback", "--yes")
    assert back.exit_code == 0, back.output
    assert not (unit.dropins / DROPIN).exists()
    assert listener_cmdline(unit.gpu.port) == unit.argv


def test_a_unit_with_unloaded_edits_is_refused(unit: Unit) -> None:
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    pid = listener_pid(unit.gpu.port)
    (unit.dropins / "override.conf").write_text('[Service]\nEnvironment="OPERATOR=2"\n')
    result = unit.deploy("apply", "kimi-eagle3", "--yes")
    assert result.exit_code == 4, result.output
    assert "NeedDaemonReload=yes" in result.output
    assert not (unit.dropins / DROPIN).exists()
    assert listener_pid(unit.gpu.port) == pid


def test_the_process_manager_never_signals_a_units_server(unit: Unit) -> None:
    if unit.slice is None:
        pytest.skip("the cgroup hierarchy is not writable here: no real unit cgroup to detect")
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    pid = listener_pid(unit.gpu.port)
    result = unit.deploy("apply", "kimi-eagle3", "--yes", "-e", "sglang_manager=process")
    assert result.exit_code == 4, result.output
    assert f"run by the systemd unit {UNIT}" in result.output
    assert listener_pid(unit.gpu.port) == pid


UNIT_USER = """
name: unit-user
hosts: all
services:
  sglang:
    manager: auto
    unit_dir: "{{ sglang_unit_dir }}"
    port: "{{ sglang_port }}"
steps:
  - restart:
      service: sglang
      args: {set: {--mem-fraction-static: 0.8}}
  - wait_healthy: {service: sglang, timeout: 60}
"""


def test_a_units_user_counts_as_naming_the_servers_user(
    unit: Unit, attacker: Attacker, arena: Path, tmp_path: Path
) -> None:
    """As root, another user's server is adopted only when named: the unit's ``User=`` names
    it (the service names nobody). The restarted unit runs as that user, as systemd starts it."""
    if unit.slice is None:
        pytest.skip("the cgroup hierarchy is not writable here: no real unit cgroup to detect")
    gpu, home = as_user(unit.gpu, attacker, arena)
    (unit.units / UNIT).write_text(
        "[Service]\n"
        f"User={attacker.name}\n"
        f'Environment="PYTHONPATH={gpu.python_path}"\n'
        f"WorkingDirectory={home}\n"
        f"ExecStart={ATTACKER_PYTHON} -m sglang.launch_server --model-path m "
        f"--port {gpu.port}\n"
        f"StandardOutput=append:{arena / 'unit.log'}\n"
    )
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(gpu.port)
    old = listener_pid(gpu.port)
    assert old is not None and Path(f"/proc/{old}").stat().st_uid == attacker.uid
    playbook = tmp_path / "unit-user.yaml"
    playbook.write_text(UNIT_USER)
    result = unit.deploy("apply", str(playbook), "--yes")
    assert result.exit_code == 0, result.output
    new = listener_pid(gpu.port)
    assert new is not None and new != old
    assert Path(f"/proc/{new}").stat().st_uid == attacker.uid
    assert "--mem-fraction-static" in (listener_cmdline(gpu.port) or [])
    back = unit.deploy("rollback", "--yes")
    assert back.exit_code == 0, back.output
    again = listener_pid(gpu.port)
    assert again is not None and Path(f"/proc/{again}").stat().st_uid == attacker.uid
    assert "--mem-fraction-static" not in (listener_cmdline(gpu.port) or [])


def test_sglang_flags_changes_a_units_flags_through_its_dropin(unit: Unit) -> None:
    """The flags playbook on a unit's server: the change goes into deploy's drop-in (a later
    `systemctl restart` keeps it), not into a hand-started process beside the unit."""
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    old = listener_pid(unit.gpu.port)
    theirs = {p.name: digest(p) for p in (unit.units / UNIT, unit.dropins / "override.conf")}
    flags = "set_flags=--mem-fraction-static 0.88"
    result = unit.deploy("apply", "sglang-flags", "-e", flags, "--yes")
    assert result.exit_code == 0, result.output
    argv = listener_cmdline(unit.gpu.port) or []
    assert listener_pid(unit.gpu.port) != old
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.88"
    assert "--mem-fraction-static 0.88" in (unit.dropins / DROPIN).read_text()
    assert {
        p.name: digest(p) for p in (unit.units / UNIT, unit.dropins / "override.conf")
    } == theirs


def test_a_units_bad_draft_path_is_refused_before_the_stop(unit: Unit) -> None:
    """The pre-stop checks (issue 30, point 3) hold for a unit's server too: a draft model
    path that does not exist is refused before the unit is stopped or its drop-in written."""
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    pid = listener_pid(unit.gpu.port)
    flags = (
        "set_flags=--speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path /nonexistent/kimi-draft"
    )
    result = unit.deploy("apply", "sglang-flags", "-e", flags, "--yes")
    assert result.exit_code == 4, result.output
    assert "/nonexistent/kimi-draft" in result.output
    assert "nothing was stopped or changed" in result.output
    assert listener_pid(unit.gpu.port) == pid
    assert not (unit.dropins / DROPIN).exists()
