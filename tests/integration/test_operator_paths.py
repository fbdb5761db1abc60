"""Scenarios an operator on a shared 8-GPU host meets, combining what other tests cover one at a
time (an operator's review of the service paths), over real sshd with the SGLang stand-in.
Each test judges the run by the host it leaves: which server serves, with which flags, where,
and what the output said.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import listener_cmdline, listener_pid
from tests.integration import test_systemd
from tests.integration.conftest import sha256
from tests.integration.test_interrupts import _servers
from tests.integration.test_service_endpoint import report, status, step
from tests.integration.test_systemd import UNIT, Unit

#: A sandbox host whose SGLang runs as the systemd unit (test_systemd's fixture).
unit = test_systemd.unit
ADDRESS = "127.0.0.7"
KEY = "sk-operator-unit-key-never-printed"


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


def _unit_argv(unit: Unit) -> list[str]:
    """The command line of the unit's main process, loading or serving ([] when none)."""
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in words and str(unit.gpu.port).encode() in words:
            return [w.decode() for w in words if w]
    return []


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


def test_rollback_after_a_reboot_starts_the_old_server(serving_059: Any) -> None:
    """The run succeeded, then the host rebooted: its server is gone, state_dir is not. The
    rollback says nothing ran to stop and brings the old server back (exit 0)."""
    gpu, deploy = serving_059
    old = listener_cmdline(gpu.port)
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    new = listener_pid(gpu.port)
    assert new is not None
    _kill_group(new)  # the reboot
    back = deploy("rollback", "--yes")
    assert back.exit_code == 0, back.output
    assert "sglang: nothing running to stop" in back.output
    assert listener_cmdline(gpu.port) == old
    assert "sglang: healthy" in deploy("status").output


def test_a_second_run_while_the_first_waits_for_its_server_touches_nothing(
    serving_059: Any,
) -> None:
    """A second apply (and a rollback) while the first holds the lock through its new server's
    load: not attempted (exit 4), the first run ends as if alone."""
    gpu, deploy = serving_059
    gpu.configure(eagle3_load_seconds=15.0)
    first = deploy.popen("apply", "kimi-eagle3", "--yes", "--json")
    try:
        pid_file = gpu.ssh.state_dir / "services" / "sglang.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the old server is stopped, the new one started: it loads
        assert listener_pid(gpu.port) is None
        loading = pid_file.read_text()
        second = deploy("apply", "kimi-eagle3", "--yes")
        assert second.exit_code == 4 and "nothing was done" in second.output, second.output
        undo = deploy("rollback", "--yes")
        assert undo.exit_code == 4 and "not attempted" in undo.output, undo.output
        assert pid_file.read_text() == loading, "the loading server was left alone"
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, out + err


def test_resolve_asks_a_keyed_server_on_one_address_where_it_listens(make_gpu_hosts: Any) -> None:
    """After a failed undo (exit 3) a human restarts the keyed server on 127.0.0.7; `deploy
    resolve` says what deploy sees: that server, healthy where it listens."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    flags = ["--host", ADDRESS, "--api-key", KEY]
    gpu_host.start_old_server(gpu, address=ADDRESS, extra_args=flags)
    gpu.configure(die_after_ready_seconds=0.0)  # every server dies once ready: the undo fails
    failed = deploy("apply", "kimi-eagle3", "--yes", "--json", "-e", "sglang_ready_timeout=30",
                    timeout=300)  # fmt: skip
    assert failed.exit_code == 3, failed.output
    run_id = report(failed.stdout)["run_id"]
    for pid in gpu_host.listener_pids(gpu.port):
        with contextlib.suppress(ProcessLookupError):
            _kill_group(pid)
    gpu.configure(die_after_ready_seconds=None)
    gpu_host.start_old_server(gpu, address=ADDRESS, extra_args=flags)
    resolved = deploy("resolve", run_id, "-m", "restarted by hand", "--yes")
    assert resolved.exit_code == 0, resolved.output
    assert f"sglang: pid {listener_pid(gpu.port)}" in resolved.stdout, resolved.output
    assert "health /health_generate: HTTP 200" in resolved.stdout, resolved.output
    assert KEY not in resolved.output


def test_equals_forms_and_spaces_in_the_operators_flags(make_gpu_hosts: Any) -> None:
    """An operator's server typed with ``--flag=value`` forms, a value with spaces, bound to
    one address with its key in ``=`` form: the restart replaces the EAGLE-3 flags in place,
    keeps the rest word for word, and a failed gate brings exactly that command line back."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    flags = [
        f"--host={ADDRESS}", f"--api-key={KEY}", "--served-model-name", "kimi k2.5 (prod)",
        "--speculative-algorithm=NEXTN", "--mem-fraction-static=0.85",
    ]  # fmt: skip
    gpu_host.start_old_server(gpu, address=ADDRESS, extra_args=flags)
    old = listener_cmdline(gpu.port)
    check = deploy("apply", "kimi-eagle3", "--check")
    assert check.exit_code == 0, check.output
    assert "--speculative-algorithm=NEXTN" in check.output and "EAGLE3" in check.output
    gpu.configure(eagle3_tokens_per_s=80.0)  # EAGLE-3 slower: the gate fails
    failed = deploy("apply", "kimi-eagle3", "--yes", "--json")
    assert failed.exit_code == 1, failed.output
    assert (
        "throughput gate failed"
        in step(report(failed.stdout)["hosts"][0], "gate_throughput")["summary"]
    )
    assert listener_cmdline(gpu.port) == old
    gpu.configure(eagle3_tokens_per_s=320.0)
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    argv = listener_cmdline(gpu.port) or []
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert "--speculative-algorithm=NEXTN" not in argv
    kept = [f"--host={ADDRESS}", f"--api-key={KEY}", "--mem-fraction-static=0.85"]
    assert all(word in argv for word in kept)
    assert argv[argv.index("--served-model-name") + 1] == "kimi k2.5 (prod)"
    for output in (check.output, failed.output, applied.output):
        assert KEY not in output


def test_an_interrupt_while_a_units_new_server_loads(unit: Unit) -> None:
    """SIGINT while the keyed unit's EAGLE-3 server loads: the loading unit is stopped at once,
    deploy's drop-in put back, the old unit serves where it did (exit 1); a later `deploy
    rollback` of that run has nothing to do and touches nothing."""
    argv = keyed_unit(unit)
    unit.gpu.configure(eagle3_load_seconds=120.0)
    process = unit.deploy.popen("apply", "kimi-eagle3", "--yes", "--json")
    deadline = time.monotonic() + 90
    while "--speculative-algorithm" not in _unit_argv(unit) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    os.kill(process.pid, signal.SIGINT)
    signalled = time.monotonic()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, out + err
    assert time.monotonic() - signalled < 60, "the load was waited out"
    assert listener_cmdline(unit.gpu.port) == argv
    assert status(f"http://{ADDRESS}:{unit.gpu.port}/server_info", KEY) == 200
    assert not (unit.dropins / "90-deploy.conf").exists()
    again = unit.deploy("rollback", "--yes")
    assert again.exit_code == 0 and "was already rolled back" in again.output, again.output
    assert listener_cmdline(unit.gpu.port) == argv


def test_another_users_job_on_gpus_the_server_does_not_use(make_gpu_hosts: Any) -> None:
    """A shared 8-GPU host: the server runs on GPUs 0,1 (CUDA_VISIBLE_DEVICES), someone's job
    holds GPU 5. The check before the stop judges GPUs 0,1 and passes; the wait for the GPUs
    after the stop must judge the same ones, not all eight (it waited out gpu_timeout for GPU 5
    with the old server stopped, then rolled back: a restart that can never succeed there)."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    gpu_host.start_old_server(gpu, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    job = subprocess.Popen(["sleep", "611"], start_new_session=True)
    try:
        gpu_host.hold_gpu(gpu, job.pid, 5)
        result = deploy("apply", "kimi-eagle3", "--yes", "--json", timeout=400)
        assert result.exit_code == 0, result.output
        assert job.poll() is None, "the other job was left alone"
        argv = listener_cmdline(gpu.port) or []
        assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    finally:
        job.kill()
        job.wait()


def test_a_server_whose_working_directory_was_removed_is_refused_saying_so(
    make_gpu_hosts: Any,
) -> None:
    """The operator started the server from a directory that was since removed and made again
    (a fresh checkout): /proc shows its cwd as 'PATH (deleted)'. Neither the new server nor the
    undo could start there: refused before the stop, naming the directory (it said 'cannot run
    PYTHON: No such file or directory', about an interpreter that exists)."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    run = gpu.ssh.root / "checkout"
    run.mkdir()
    root = f"cd {shlex.quote(str(gpu.ssh.root))} ;"
    gpu_host.run_by_hand(gpu, gpu.old_server_command().replace(root, f"cd {run} ;"))
    gpu_host.wait_healthy(gpu.port)
    pid = listener_pid(gpu.port)
    shutil.rmtree(run)
    run.mkdir()
    result = deploy("apply", "sglang-flags", "-e", "set_flags=--mem-fraction-static 0.8", "--yes")
    assert result.exit_code == 4, result.output
    assert f"working directory {run} was removed" in result.output, result.output
    assert "cannot run" not in result.output
    assert listener_pid(gpu.port) == pid, "nothing was stopped"


def test_a_server_still_loading_when_the_run_begins_is_left_to_load(make_gpu_hosts: Any) -> None:
    """The operator has just started the server by hand: it loads, holding its GPUs, and does
    not listen yet (SGLang binds its port once loaded). The run saw 'not running', waited out
    gpu_timeout for those GPUs, then refused to undo beside the server that had meanwhile bound
    the port (exit 3, the patched file left in place). It must fail before it stops or starts
    anything, say why, and put the file back (exit 1), the loading server untouched."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    original = sha256(gpu.model_file)
    gpu.configure(load_seconds=20.0)
    gpu_host.run_by_hand(gpu, gpu.old_server_command())
    deadline = time.monotonic() + 10
    while not _servers(gpu.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    hand = _servers(gpu.port)
    result = deploy("apply", "kimi-eagle3", "--yes", "--json", timeout=300)
    assert result.exit_code == 1, result.output
    host = report(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back", host
    assert "a server still loading" in host["error"], host["error"]
    assert sha256(gpu.model_file) == original
    assert _servers(gpu.port) == hand, "no server stopped or started beside it"
    gpu_host.wait_healthy(gpu.port, 60)
    assert listener_pid(gpu.port) == hand[0]


def test_an_interrupt_during_the_baseline_changes_nothing(serving_059: Any) -> None:
    """Ctrl-C while the old server is measured (the gate's baseline, taken just before the
    run's first change): the run must not go on to make that change (it patched the file after
    the signal, then rolled it back): nothing changed, said so, the old server untouched."""
    gpu, deploy = serving_059
    pid = listener_pid(gpu.port)
    original = sha256(gpu.model_file)
    gpu.configure(tokens_per_s=20.0)  # 3 s a request: the baseline takes a while
    log = gpu.ssh.root / "manual-sglang.log"
    process = deploy.popen("apply", "kimi-eagle3", "--yes", "--json")
    deadline = time.monotonic() + 60
    while "POST /generate" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # inside the baseline's first batch
    os.kill(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, out + err
    host = report(out)["hosts"][0]
    assert "nothing was changed" in host["error"], host["error"]
    assert host["changed_files"] == [], host
    assert not any(s["status"] == "changed" for s in host["steps"]), host["steps"]
    assert sha256(gpu.model_file) == original
    assert listener_pid(gpu.port) == pid


def test_a_rollback_does_not_load_a_units_unreviewed_edits(unit: Unit) -> None:
    """After the run, the operator edits their own drop-in and has not reloaded systemd. The
    apply refuses that (its daemon-reload would deploy the edit unreviewed); the rollback's
    daemon-reload loaded it silently and restarted the unit with it. It must refuse before it
    touches anything, saying why, and go through once the operator has reloaded."""
    unit.systemctl("start", UNIT)
    gpu_host.wait_healthy(unit.gpu.port)
    applied = unit.deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    serving = listener_pid(unit.gpu.port)
    (unit.dropins / "override.conf").write_text('[Service]\nEnvironment="OPERATOR=2"\n')
    refused = unit.deploy("rollback", "--yes")
    assert refused.exit_code != 0, refused.output
    assert "NeedDaemonReload=yes" in refused.output, refused.output
    assert listener_pid(unit.gpu.port) == serving, "nothing was stopped"
    assert (unit.dropins / "90-deploy.conf").exists(), "nothing was restored"
    unit.systemctl("daemon-reload")  # the operator reviewed the edit and loaded it
    back = unit.deploy("rollback", "--yes")
    assert back.exit_code == 0, back.output
    assert not (unit.dropins / "90-deploy.conf").exists()
    assert "--speculative-algorithm" not in _unit_argv(unit)
