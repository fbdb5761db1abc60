"""An undo target known to start (issue 30, point 1): drift under a running server.

The motivating case, over real sshd with the stand-in: a host runs the EAGLE-3 server deploy
started on the patched file; a ``git checkout -- .`` in the source checkout reverts the file
under it. "The state before the next run" (the reverted file with the EAGLE-3 command line)
was never seen serving, and cannot start. The next apply says so in one line and refuses
before the stop (exit 4), the server still serving; once the operator restarts the server on
the file as it is, the apply reaches the desired state. A file deploy itself wrote after the
server started (``--skip-tags service``) is not drift.
"""

from __future__ import annotations

import time

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from deploy.sandbox.wheels import kimi_k25_source
from tests.integration.conftest import Deploy, sha256


def test_a_file_reverted_under_the_running_server_is_refused_before_the_stop(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    serving = listener_pid(gpu.port)
    assert "--speculative-algorithm" in (listener_cmdline(gpu.port) or [])
    time.sleep(1.5)
    gpu.model_file.write_bytes(kimi_k25_source("0.5.9"))  # git checkout -- .
    reverted = sha256(gpu.model_file)

    for args in (["--yes"], ["--check"]):
        refused = deploy("apply", "kimi-eagle3", *args)
        assert refused.exit_code == 4, refused.output
        lines = [line for line in refused.output.splitlines() if "drift:" in line]
        assert lines, refused.output  # said once (the --check plan repeats it under its step)
        assert f"drift: {gpu.model_file} changed at" in lines[0]
        assert f"after the running server (pid {serving}) started" in lines[0]
        assert "nothing was stopped or changed" in lines[0]
        assert listener_pid(gpu.port) == serving, "still serving, untouched"
        assert sha256(gpu.model_file) == reverted

    # The operator restarts the server on the file as it is (no EAGLE-3: it could not load).
    gpu_host.run_by_hand(gpu, f"kill {serving}")
    deadline = time.monotonic() + 30
    while listener_pid(gpu.port) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    gpu_host.start_old_server(gpu)
    again = deploy("apply", "kimi-eagle3", "--yes")
    assert again.exit_code == 0, again.output
    assert "--speculative-algorithm" in (listener_cmdline(gpu.port) or [])


def test_a_file_deploy_wrote_after_the_server_started_is_not_drift(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    time.sleep(1.5)
    files = deploy("apply", "kimi-eagle3", "--yes", "--skip-tags", "service")
    assert files.exit_code == 0, files.output
    full = deploy("apply", "kimi-eagle3", "--yes")
    assert full.exit_code == 0, full.output
    assert "drift" not in full.output
    # When deploy starts a server, the run output names its log file.
    log = gpu.ssh.state_dir / "services" / "sglang.log"
    assert f"its log: {log}" in full.output, full.output
    assert log.exists()
    assert "--speculative-algorithm" in (listener_cmdline(gpu.port) or [])
