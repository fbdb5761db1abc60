"""Scenarios an operator on a shared 8-GPU host meets, combining what other tests cover one at a
time (issue 35's review), over real sshd with the SGLang stand-in. Each test judges the run by
the host it leaves: which server serves, with which flags, where, and what the output said.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import listener_cmdline, listener_pid
from tests.integration import test_systemd
from tests.integration.test_systemd import UNIT, Unit

#: A sandbox host whose SGLang runs as the systemd unit (test_systemd's fixture).
unit = test_systemd.unit
ADDRESS = "127.0.0.7"
KEY = "sk-operator-unit-key-never-printed"


def report(stdout: str) -> dict[str, Any]:
    return dict(json.loads(stdout))


def step(host: dict[str, Any], kind: str) -> dict[str, Any]:
    return dict(next(s for s in host["steps"] if s["kind"] == kind))


def status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        error.close()
        return int(error.code)


def keyed_unit(unit: Unit) -> list[str]:
    """The unit's ExecStart with ``--host ADDRESS --api-key KEY`` added; started, healthy."""
    argv = [*unit.argv, "--host", ADDRESS, "--api-key", KEY]
    text = (unit.units / UNIT).read_text()
    old = f"ExecStart={' '.join(unit.argv[:4])} \\\n    {' '.join(unit.argv[4:])}\n"
    assert old in text
    (unit.units / UNIT).write_text(text.replace(old, f"ExecStart={' '.join(argv)}\n"))
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port, address=ADDRESS)
    return argv


def test_a_units_keyed_server_on_one_address_is_measured_and_rolled_back_there(
    unit: Unit, tmp_path: Path
) -> None:
    """A unit bound to 127.0.0.7 with --api-key whose EAGLE-3 is slower: the gate compares with
    the old unit measured where it listens, and the rollback waits for the old unit there and
    ends with it serving (exit 1). Before, both asked 127.0.0.1: no baseline ('Connect
    failed'), then the undo's 60 s wait failed with the old unit serving on 127.0.0.7 (exit 3)."""
    argv = keyed_unit(unit)
    unit.gpu.configure(eagle3_tokens_per_s=80.0)  # EAGLE-3 slower: the gate fails
    log = tmp_path / "run.log"
    result = unit.deploy("apply", "kimi-eagle3", "--yes", "--json", "--log-file", str(log))
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back", host.get("error")
    gate = step(host, "gate_throughput")
    assert "throughput gate failed" in gate["summary"]
    # failed on the figures: the old unit was measured where it listens, with its key
    assert "no baseline" not in gate["summary"], gate["summary"]
    assert gate["figures"]["before_tokens_per_s_c1"] > 0
    assert any("old server" in line and "healthy" in line for line in host["rollback"])
    assert listener_cmdline(unit.gpu.port) == argv
    assert status(f"http://{ADDRESS}:{unit.gpu.port}/server_info", KEY) == 200
    assert KEY not in result.output and KEY not in log.read_text()


def _kill_group(pid: int) -> None:
    """SIGKILL ``pid``'s process group and wait until it is gone (a crash, or a reboot)."""
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_pid_file_naming_a_reused_pid_is_not_taken_for_the_server(make_gpu_hosts: Any) -> None:
    """The server deploy started is gone (crashed; the host rebooted) and its pid now belongs to
    another process: a flags run must neither stop that process nor report it as the server."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    gpu_host.start_old_server(gpu)
    applied = deploy("apply", "sglang-flags", "-e", "set_flags=--mem-fraction-static 0.88", "--yes")
    assert applied.exit_code == 0, applied.output
    pid_file = gpu.ssh.state_dir / "services" / "sglang.pid"
    recorded = pid_file.read_text().split()  # the pid and its start time
    server, start = int(recorded[0]), recorded[1]
    assert listener_pid(gpu.port) == server
    _kill_group(server)
    # Another program now has the pid the file names (pids wrap; a reboot starts anew).
    sleeper = subprocess.Popen(["sleep", "607"], start_new_session=True)
    other = sleeper.pid
    pid_file.write_text(f"{other} {start}\n")  # as the file reads once its pid is reused
    try:
        status = deploy("status")
        assert f"pid {other}" not in status.output, status.output
        again = deploy("apply", "sglang-flags", "-e", "set_flags=--mem-fraction-static 0.9",
                       "--yes", "--json")  # fmt: skip
        assert Path(f"/proc/{other}").exists(), "another program was stopped as the server"
        assert f"pid {other}" not in again.output, again.output
    finally:
        sleeper.kill()
        sleeper.wait()
