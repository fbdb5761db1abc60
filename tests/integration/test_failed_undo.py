"""A failed undo is reported once, then handed to a human (issue 30, point 2).

Over real sshd with the stand-in: an apply whose new server does not come up is rolled back,
and the old server does not come up either (both load for longer than the ready timeout).
That undo *ran and failed*: the host's journal says so, and every later apply and rollback on
the host refuses in one line (exit 3), touching nothing, naming the run and ``deploy resolve``.
The operator brings the server back by hand, ``deploy resolve RUN -m why`` shows what it finds
(the file's checksum, the server serving) and records who, when and why; the next apply runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.integration.conftest import Deploy, sha256


def _journal(gpu: GpuHost, run_id: str) -> list[dict[str, object]]:
    path = gpu.ssh.state_dir / "runs" / run_id / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _servers(port: int) -> list[int]:
    """Every stand-in process started for ``port`` (loading ones too: they do not listen)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in argv and str(port).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _kill_all(port: int) -> None:
    for pid in _servers(port):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _servers(port) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_failed_undo_is_reported_once_then_resolved_by_a_human(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    original = sha256(gpu.model_file)
    # From now on every server dies as it becomes ready (a CUDA error): the new one, and in
    # the undo the old one. Nothing a check before the stop could have seen.
    gpu.configure(die_after_ready_seconds=0.0)
    slow = ("-e", "sglang_ready_timeout=30")
    failed = deploy("apply", "kimi-eagle3", "--yes", "--json", *slow, timeout=300)
    assert failed.exit_code == 3, failed.output
    run_id = json.loads(failed.stdout)["run_id"]
    host = json.loads(failed.stdout)["hosts"][0]
    assert host["outcome"] == "rollback failed"
    assert f"deploy resolve {run_id}" in host["error"], host["error"]
    last = _journal(gpu, run_id)[-1]
    assert last["event"] == "rollback_failed" and last.get("interrupted") in (None, False)
    assert sha256(gpu.model_file) == original, "the file was restored before the start failed"

    # Every later apply and rollback refuses in one line, exit 3, touching nothing.
    journals = sorted(p.name for p in (gpu.ssh.state_dir / "runs").iterdir())
    servers = sorted(_servers(gpu.port))
    for command in (
        ["apply", "kimi-eagle3", "--yes", *slow],
        ["rollback", "--yes"],
        ["rollback", run_id, "--yes"],
    ):
        again = deploy(*command, timeout=120)
        assert again.exit_code == 3, (command, again.output)
        lines = [line for line in again.output.splitlines() if "deploy resolve" in line]
        assert lines and f"the undo of run {run_id}" in lines[0], again.output
        assert sorted(p.name for p in (gpu.ssh.state_dir / "runs").iterdir()) == journals
        assert sorted(_servers(gpu.port)) == servers, "no server stopped or started"
        assert _journal(gpu, run_id)[-1] == last, "the failed run's record is unchanged"
    status = deploy("status")
    assert f"`deploy resolve {run_id} -m WHY`" in status.stdout, status.output

    # A human brings the host back: stops what the failed undo left loading, starts the
    # server as it was, fast again.
    _kill_all(gpu.port)
    gpu.configure(die_after_ready_seconds=None)
    gpu_host.start_old_server(gpu)
    serving = listener_pid(gpu.port)
    resolved = deploy("resolve", run_id, "-m", "restarted by hand", "--yes")
    assert resolved.exit_code == 0, resolved.output
    assert f"{gpu.model_file}: sha256 {original[:16]}, as before the run" in resolved.stdout
    assert f"sglang: pid {serving}" in resolved.stdout, resolved.output
    assert "health /health_generate: HTTP 200" in resolved.stdout, resolved.output
    assert f"run {run_id} closed: resolved by" in resolved.stdout
    record = _journal(gpu, run_id)[-1]
    assert record["event"] == "resolved" and record["why"] == "restarted by hand"
    assert "@" in str(record["by"]) and record["ts"] and "as before the run" in str(record["found"])
    assert listener_pid(gpu.port) == serving, "resolve changes nothing on the host"
    again = deploy("resolve", run_id, "--yes")
    assert again.exit_code == 0 and "nothing to resolve: run" in again.stdout, again.output

    # The host is free again: the apply runs (and succeeds now that the server loads fast).
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    assert "--speculative-algorithm" in (listener_cmdline(gpu.port) or [])


def test_undo_first_never_stops_a_server_the_run_did_not_start(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    """The workstation dies while the new server loads; an operator stops it and starts the
    server by hand to recover. The next apply's "undo first" must not stop that server: the
    run recorded which server it started (pid, start time, command line), and this is not
    it. It refuses in one line (exit 3, naming ``deploy resolve``), touching nothing."""
    gpu, deploy = serving_059
    gpu.configure(eagle3_load_seconds=60.0)
    process = deploy.popen("apply", "kimi-eagle3", "--yes", "--json")
    deadline = time.monotonic() + 60
    while not any(b"EAGLE3" in Path(f"/proc/{p}/cmdline").read_bytes() for p in _servers(gpu.port)):
        assert time.monotonic() < deadline, "the new server never started"
        time.sleep(0.05)
    time.sleep(0.5)  # its start is journaled with the pid
    process.kill()  # the workstation dies mid-load
    process.communicate(timeout=30)
    history = json.loads(deploy("history", "--json").stdout)
    run_id = history[-1]["run_id"]
    done = [e for e in _journal(gpu, run_id) if e["event"] == "done" and e.get("service")]
    assert done and done[-1]["started"]["pid"] and done[-1]["started"]["start"], done

    # The operator recovers by hand: stops the loading server, starts the old one.
    _kill_all(gpu.port)
    gpu.configure(eagle3_load_seconds=None)
    gpu_host.start_old_server(gpu)
    by_hand = listener_pid(gpu.port)
    journal = _journal(gpu, run_id)
    refused = deploy("apply", "kimi-eagle3", "--yes")
    assert refused.exit_code == 3, refused.output
    assert f"which run {run_id} did not start" in refused.output, refused.output
    assert f"deploy resolve {run_id}" in refused.output
    assert listener_pid(gpu.port) == by_hand, "the hand-started server was not touched"
    assert _journal(gpu, run_id) == journal, "nothing written"
    again = deploy("rollback", run_id, "--yes")
    assert again.exit_code == 3 and listener_pid(gpu.port) == by_hand, again.output

    resolved = deploy("resolve", run_id, "-m", "restarted by hand after the crash", "--yes")
    assert resolved.exit_code == 0, resolved.output
    assert "it is unfinished" in resolved.stdout and f"sglang: pid {by_hand}" in resolved.stdout
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
