"""A server with an API key, bound to one address: probed where it listens, with its key
(issue 31, points 4 and 5), over real sshd with the stand-in.

The operator's server listens on 127.0.0.7 only (a loopback address other than 127.0.0.1, the
sandbox's stand-in for ``--host 10.0.0.5``) and wants ``Authorization: Bearer KEY``: before,
every probe went to 127.0.0.1 without a key — connection refused for the whole readiness
timeout, then 401 from the smoke test. The key never shows in the terminal, ``--json``, the
log file or history.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.integration.conftest import Deploy

ADDRESS = "127.0.0.7"
KEY = "sk-operator-key-5e3cr3t-never-printed"


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


@pytest.fixture
def keyed(make_gpu_hosts: Any) -> tuple[GpuHost, Deploy]:
    """A 0.5.9 host whose server was started by hand with --host 127.0.0.7 --api-key KEY."""
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    gpu_host.start_old_server(
        gpu, address=ADDRESS, extra_args=["--host", ADDRESS, "--api-key", KEY]
    )
    return gpu, deploy


def test_the_stand_in_wants_the_key_except_on_health(keyed: tuple[GpuHost, Deploy]) -> None:
    gpu, _ = keyed
    base = f"http://{ADDRESS}:{gpu.port}"
    assert status(f"{base}/health") == 200 and status(f"{base}/health_generate") == 200
    assert status(f"{base}/server_info") == 401
    assert status(f"{base}/server_info", "wrong") == 401
    assert status(f"{base}/server_info", KEY) == 200
    refused = urllib.request.Request(f"{base}/generate", data=b'{"text": "x"}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(refused, timeout=10)
    denied.value.close()
    assert denied.value.code == 401


def _no_key_anywhere(result_output: str, deploy: Deploy, log: Path) -> None:
    assert KEY not in result_output
    assert KEY not in log.read_text()
    history = deploy("history", "--json")
    assert history.exit_code == 0, history.output
    assert KEY not in history.output
    state = Path(os.environ["XDG_STATE_HOME"]) / "deploy"
    for path in state.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


def test_restart_probes_where_the_server_listens_with_its_key(
    keyed: tuple[GpuHost, Deploy], tmp_path: Path
) -> None:
    gpu, deploy = keyed
    old_pid = listener_pid(gpu.port)
    log = tmp_path / "run.log"
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", "--log-file", str(log), "-v")
    assert result.exit_code == 0, result.output
    host = report(result.stdout)["hosts"][0]
    assert f"listens on {ADDRESS}:{gpu.port} as before" in step(host, "wait_healthy")["summary"]
    assert step(host, "smoke")["status"] == "ok"
    gate = step(host, "gate_throughput")
    assert gate["status"] == "ok", gate["summary"]
    # the baseline was measured on the old server, with its key, where it listened
    assert gate["figures"]["before_tokens_per_s_c1"] > 0
    new_pid = listener_pid(gpu.port)
    assert new_pid not in (None, old_pid)
    argv = listener_cmdline(gpu.port) or []
    assert "EAGLE3" in argv and argv[argv.index("--host") + 1] == ADDRESS
    assert argv[argv.index("--api-key") + 1] == KEY, "the operator's key is kept"
    _no_key_anywhere(result.output, deploy, log)


def test_a_rollback_waits_for_the_old_server_where_it_listened(
    keyed: tuple[GpuHost, Deploy], tmp_path: Path
) -> None:
    gpu, deploy = keyed
    gpu.configure(eagle3_tokens_per_s=80.0)  # EAGLE-3 slower: the gate fails, the host rolls back
    old_command = listener_cmdline(gpu.port)
    log = tmp_path / "run.log"
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", "--log-file", str(log))
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back", host.get("error")
    assert "throughput gate failed" in step(host, "gate_throughput")["summary"]
    assert listener_cmdline(gpu.port) == old_command
    gpu_host.wait_healthy(gpu.port, 10, address=ADDRESS)
    assert status(f"http://{ADDRESS}:{gpu.port}/server_info", KEY) == 200
    _no_key_anywhere(result.output, deploy, log)


def test_the_rollbacks_wait_uses_the_playbooks_timeout(make_gpu_hosts: Any) -> None:
    """sglang_ready_timeout bounds the rollback's wait for the old server too (it waited the
    service's 2700 s default before)."""
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    gpu_host.start_old_server(gpu)
    # The new (EAGLE-3) server loads at once and is too slow; the old one, started again by
    # the rollback, loads for 8 s: longer than the playbook's 3 s.
    gpu.configure(load_seconds=8.0, eagle3_load_seconds=0.1, eagle3_tokens_per_s=80.0)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", "-e", "sglang_ready_timeout=3")
    assert result.exit_code == 3, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rollback failed"
    assert "not healthy after 3 s" in host["error"], host["error"]


def _fake_torch(site: Path) -> None:
    """torch 2.9.1 built for CUDA 12.9, as pip installs it: metadata and torch/version.py,
    which the version lookup reads as text. Importing the patched module before the stop
    (issue 30) imports torch for real, so its ``__init__`` is the stand-in's stub module
    (torch.nn and the rest resolve to stubs), not the real torch."""
    dist = site / "torch-2.9.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.9.1\n")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        "import sys\nfrom sglang.standin_stubs import _StubModule\n"
        "_stub = _StubModule(__name__)\n_stub.__path__ = []\nsys.modules[__name__] = _stub\n"
    )
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__version__ = '2.9.1'\ncuda: Optional[str] = '12.9'\n"
    )


def test_the_server_confirms_eagle3_and_the_report_records_its_stack(
    make_gpu_hosts: Any,
) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    _fake_torch(gpu.python_path)
    gpu_host.start_old_server(gpu)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 0, result.output
    wait = step(report(result.stdout)["hosts"][0], "wait_healthy")
    assert "/server_info confirms speculative_algorithm=EAGLE3" in wait["summary"]
    assert wait["figures"]["sglang_version"] == "0.5.9-standin"
    assert wait["figures"]["torch_version"] == "2.9.1"
    assert wait["figures"]["cuda_version"] == "12.9"
    assert wait["figures"]["driver_version"] == "580.159.04"
    assert "SGLang 0.5.9-standin, torch 2.9.1 (CUDA 12.9), driver 580.159.04" in wait["summary"]


def test_a_restart_that_lost_the_eagle3_flags_fails_and_rolls_back(make_gpu_hosts: Any) -> None:
    """A launcher drops the flags: healthy, answers, as fast as before — and no EAGLE-3. Only
    the server's own /server_info says so."""
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu = gpus[0]
    gpu_host.start_old_server(gpu)
    gpu.configure(drop_speculative=True)
    old_command = listener_cmdline(gpu.port)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back"
    wait = step(host, "wait_healthy")
    assert wait["status"] == "failed"
    assert "speculative_algorithm is None, not 'EAGLE3'" in wait["summary"], wait["summary"]
    assert listener_cmdline(gpu.port) == old_command


def test_status_finds_the_server_where_it_listens(keyed: tuple[GpuHost, Deploy]) -> None:
    """``deploy status`` on a host whose server is bound to one address: healthy there, not
    "nothing listening" (loopback refuses; the host's listening sockets say where to ask)."""
    gpu, deploy = keyed
    result = deploy("status")
    assert result.exit_code == 0, result.output
    assert f"sglang: healthy on {ADDRESS}:{gpu.port}" in result.output, result.output
    assert KEY not in result.output
