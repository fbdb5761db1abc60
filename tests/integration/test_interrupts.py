"""Interrupts act now (issue 30, point 4), over real sshd with the stand-in.

- Ctrl-C (or SIGTERM) while the new server loads cuts the wait short: the loading server is
  stopped and the old one restarted at once, never after the new one's load (2 minutes here).
- ``deploy rollback`` handles signals as ``apply`` does: no click "Aborted!"; the first signal
  lets a host being undone finish its undo, a second abandons at once with exit 3, naming the
  host left half undone and the command that finishes the job (which then does).
- Ctrl-C at a confirmation prompt: "Nothing was changed.", exit 130.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from deploy.sandbox.gpu_host import GpuHost, listener_cmdline
from tests.integration.conftest import Deploy
from tests.integration.terminal import on_terminal

EAGLE3 = b"--speculative-algorithm"


def _servers(port: int, *, eagle3: bool | None = None) -> list[int]:
    """Stand-in main processes started for ``port`` (loading ones too: they do not listen)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" not in argv or str(port).encode() not in argv:
            continue
        if eagle3 is None or (EAGLE3 in argv) == eagle3:
            pids.append(int(entry.name))
    return pids


def _wait_for(condition, seconds: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_the_load_stops_the_loading_server_at_once(
    serving_059: tuple[GpuHost, Deploy], signum: int
) -> None:
    gpu, deploy = serving_059
    old = listener_cmdline(gpu.port)
    gpu.configure(eagle3_load_seconds=120.0)  # the new server would load for two minutes
    process = deploy.popen("apply", "kimi-eagle3", "--yes", "--json")
    _wait_for(lambda: bool(_servers(gpu.port, eagle3=True)))
    time.sleep(1.0)  # well inside the wait for readiness
    interrupted = time.monotonic()
    os.kill(process.pid, signum)
    out, err = process.communicate(timeout=90)
    took = time.monotonic() - interrupted
    assert process.returncode == 1, out + err
    assert took < 30, f"the load was waited out: {took:.0f} s after the signal"
    host = json.loads(out)["hosts"][0]
    assert host["outcome"] == "rolled back", host
    assert "interrupted by" in host["error"], host["error"]
    assert listener_cmdline(gpu.port) == old, "the old server serves again"
    assert not _servers(gpu.port, eagle3=True), "the loading server was stopped"
    assert "Aborted!" not in err and "Traceback" not in err


def _apply_then_slow_old_server(gpu: GpuHost, deploy: Deploy) -> str:
    applied = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert applied.exit_code == 0, applied.output
    gpu.configure(load_seconds=30.0)  # the old server's load, in the rollback
    return str(json.loads(applied.stdout)["run_id"])


def test_rollback_first_signal_finishes_the_undo(serving_059: tuple[GpuHost, Deploy]) -> None:
    gpu, deploy = serving_059
    old = listener_cmdline(gpu.port)
    _apply_then_slow_old_server(gpu, deploy)
    gpu.configure(load_seconds=4.0)
    process = deploy.popen("rollback", "--yes")
    _wait_for(lambda: bool(_servers(gpu.port, eagle3=False)))
    os.kill(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, out + err
    assert "hosts being rolled back finish their undo" in err, err
    assert "Aborted!" not in out + err and "Traceback" not in err
    assert listener_cmdline(gpu.port) == old


def test_rollback_second_signal_abandons_and_names_the_command_that_finishes(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    old = listener_cmdline(gpu.port)
    run_id = _apply_then_slow_old_server(gpu, deploy)
    process = deploy.popen("rollback", "--yes")
    _wait_for(lambda: bool(_servers(gpu.port, eagle3=False)))
    os.kill(process.pid, signal.SIGINT)
    time.sleep(0.5)
    os.kill(process.pid, signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, out + err
    assert f"left half undone: gpu-1. `deploy rollback {run_id}` finishes the job" in err, err
    assert "Aborted!" not in out + err and "Traceback" not in err
    gpu.configure(load_seconds=0.5)
    finished = deploy("rollback", run_id, "--yes", timeout=180)
    assert finished.exit_code == 0, finished.output
    assert listener_cmdline(gpu.port) == old


def test_ctrl_c_at_the_prompt_changes_nothing_exit_130(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    env = {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}
    before = gpu.model_file.read_bytes()
    code, shown = on_terminal(
        ["apply", "kimi-eagle3"], deploy.workdir, env, answers=[("Apply these changes?", "\x03")]
    )
    assert code == 130, shown
    assert "Nothing was changed." in shown and "Aborted!" not in shown, shown
    assert gpu.model_file.read_bytes() == before
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    code, shown = on_terminal(["rollback"], deploy.workdir, env, answers=[("Proceed?", "\x03")])
    assert code == 130, shown
    assert "Nothing was changed." in shown and "Aborted!" not in shown, shown
    assert gpu.model_file.read_bytes() != before, "still the applied file"
