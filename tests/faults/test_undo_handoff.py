"""Issue 30's cases as rows of docs/reliability.md: a failed undo handed to a human, a
rollback interrupted twice, drift under a running server, and odd commands.

The oracle is the host (the model file's sha256, the listening server's command line), never
what deploy says. The same behaviours are tested in depth in tests/integration
(test_failed_undo, test_interrupts, test_undo_target, test_odd_commands); here each is one
published row.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import yaml

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import listener_pid
from deploy.sandbox.wheels import kimi_k25_source
from tests.faults.conftest import LEDGER, FaultHost, Record, record_check


def _row(host: FaultHost, fault: str, point: str, command: str, exits: tuple[int, int], *,
         expect: tuple[str, str], ok: bool, note: str) -> bool:  # fmt: skip
    state, service = host.file_state(), host.service_state()
    consistent = ok and (state, service) == expect and host.healthy()
    LEDGER.add(
        Record(
            fault=fault,
            point=point,
            next_command=command,
            fault_exit=exits[0],
            fault_outcome="",
            next_exit=exits[1],
            file_state=state,
            service_state=service,
            consistent=consistent,
            truthful=ok,
            bytes_lost=host.bytes_lost(),
            note=note,
        )
    )
    return consistent


def _servers(port: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
            if b"sglang.launch_server" in argv and str(port).encode() in argv:
                pids.append(int(entry.name))
    return pids


def test_a_failed_undo_is_refused_until_resolved(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host(service=True)
    assert host.gpu is not None
    host.gpu.configure(die_after_ready_seconds=0.0)  # every start dies: the new, then the old
    failed = host.deploy("apply", "kimi-eagle3", "--yes", "--json", timeout=300)
    run_id = json.loads(failed.stdout)["run_id"]
    refused = host.deploy("apply", "kimi-eagle3", "--yes")
    refused_ok = refused.exit_code == 3 and f"deploy resolve {run_id}" in refused.output
    for pid in _servers(host.gpu.port):
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    host.gpu.configure(die_after_ready_seconds=None)
    gpu_host.start_old_server(host.gpu)  # the human brings the server back
    resolved = host.deploy("resolve", run_id, "-m", "restarted by hand", "--yes")
    ok = failed.exit_code == 3 and refused_ok and resolved.exit_code == 0
    assert _row(
        host, "failed undo", "the old server dies as it becomes ready, in the undo",
        "apply (refused: exit 3, touching nothing), then resolve", (failed.exit_code, 0),
        expect=("before", "old"), ok=ok,
        note="reported once; later apply refused naming `deploy resolve`; closed by a human",
    ), failed.output + refused.output + resolved.output  # fmt: skip


def test_a_rollback_interrupted_twice_is_finished_by_rollback(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host(service=True)
    assert host.gpu is not None
    applied = host.deploy("apply", "kimi-eagle3", "--yes", "--json")
    run_id = json.loads(applied.stdout)["run_id"]
    host.gpu.configure(load_seconds=30.0)  # the old server's load, in the rollback
    process = host.deploy.popen("rollback", run_id, "--yes")
    deadline = time.monotonic() + 120
    while not any(b"EAGLE3" not in Path(f"/proc/{p}/cmdline").read_bytes()
                  for p in _servers(host.gpu.port)):  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGINT)
    assert process.stderr is not None
    line = process.stderr.readline()
    while line and "SIGINT" not in line:
        line = process.stderr.readline()
    os.kill(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    named = f"`deploy rollback {run_id}` finishes the job" in err
    host.gpu.configure(load_seconds=0.5)
    finished = host.deploy("rollback", run_id, "--yes", timeout=180)
    ok = process.returncode == 3 and named and finished.exit_code == 0
    assert _row(
        host, "interrupt", "SIGINT twice while the rollback waits for the old server",
        "rollback RUN", (process.returncode, finished.exit_code), expect=("before", "old"),
        ok=ok, note="exit 3 naming the host and `deploy rollback RUN`, which finished it",
    ), err + finished.output  # fmt: skip


def test_drift_under_the_running_server_refuses_before_the_stop(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host(service=True)
    assert host.gpu is not None
    applied = host.deploy("apply", "kimi-eagle3", "--yes")
    serving = listener_pid(host.gpu.port)
    time.sleep(1.5)
    host.model_file.write_bytes(kimi_k25_source("0.5.9"))  # git checkout -- . under it
    refused = host.deploy("apply", "kimi-eagle3", "--yes")
    passed = (
        applied.exit_code == 0
        and refused.exit_code == 4
        and "drift:" in refused.output
        and listener_pid(host.gpu.port) == serving
    )
    record_check(
        "drift", "file reverted under the running EAGLE-3 server: apply refuses before the stop",
        passed, "(exit 4, the server untouched)",
    )  # fmt: skip
    assert passed, refused.output


def test_odd_commands_exit_2_touching_no_host(make_fault_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    cases = {
        "rollback of a run id that does not exist": ["rollback", "no-such-run", "--yes"],
        "rollback of a run id that is a path": ["rollback", "--yes", "--", "../../etc/passwd"],
        "show of a run id that is a path": ["show", "--", "/etc/passwd"],
    }
    results = {name: host.deploy(*argv) for name, argv in cases.items()}
    document = yaml.safe_load(host.inventory.read_text())
    ran = tmp_path / "ran"
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n    ProxyCommand sh -c 'touch {ran}; nc %h %p'\n")
    document["hosts"]["gpu-1"].update(address=f"127.0.0.1;touch {ran}", ssh_config=str(config))
    host.inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    results["an address with ';' and a ProxyCommand"] = host.deploy("rollback", "--yes")
    for name, result in results.items():
        passed = result.exit_code == 2 and "Traceback" not in result.output
        passed = passed and not ran.exists() and not host.state_dir.exists()
        record_check("odd command", name, passed, "(exit 2, no host contacted)")
        assert passed, (name, result.output)
