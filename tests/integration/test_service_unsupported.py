"""Servers deploy does not restart are refused before anything is touched, in one line, exit 4
(issue 31, point 3), over real sshd with the stand-in: a multi-node server (``--nnodes 2``)
and a container's port (a ``docker-proxy`` listener, as docker publishes a port). The cgroup
detection itself is tested on real /proc/PID/cgroup contents (tests/unit/test_service_identity).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from typing import Any

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import listener_cmdline, listener_pid
from tests.integration.conftest import sha256


def _refused(result: Any) -> dict[str, Any]:
    assert result.exit_code == 4, result.output
    host = json.loads(result.stdout)["hosts"][0]
    assert host["outcome"] == "not attempted"
    assert "\n" not in host["error"]
    return dict(host)


def test_a_multi_node_server_is_refused_untouched(make_gpu_hosts: Any) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    gpu_host.start_old_server(gpu, extra_args=["--nnodes", "2", "--node-rank", "0"])
    pid, before = listener_pid(gpu.port), sha256(gpu.model_file)
    host = _refused(deploy("apply", "kimi-eagle3", "--yes", "--json"))
    assert "is one of 2 nodes (--nnodes 2)" in host["error"], host["error"]
    assert "nothing was touched" in host["error"]
    assert sha256(gpu.model_file) == before and listener_pid(gpu.port) == pid


def test_a_containers_published_port_is_refused_untouched(make_gpu_hosts: Any) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    proxy = (
        "import socket, time; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {gpu.port})); s.listen(); time.sleep(120)"
    )
    # docker publishes a container's port through docker-proxy (argv[0] as docker runs it)
    command = f"exec -a docker-proxy {shlex.quote(sys.executable)} -c {shlex.quote(proxy)}"
    gpu_host.run_by_hand(gpu, f"setsid nohup bash -c {shlex.quote(command)} >/dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    while (listener_cmdline(gpu.port) or [""])[0] != "docker-proxy":
        assert time.monotonic() < deadline, listener_cmdline(gpu.port)
        time.sleep(0.05)
    pid, before = listener_pid(gpu.port), sha256(gpu.model_file)
    assert pid is not None
    try:
        host = _refused(deploy("apply", "kimi-eagle3", "--yes", "--json"))
        assert "runs in a docker container" in host["error"], host["error"]
        assert sha256(gpu.model_file) == before and listener_pid(gpu.port) == pid
    finally:
        os.kill(pid, signal.SIGKILL)
