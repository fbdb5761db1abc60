"""A fleet in several processes (issue 33, point 3), over real sshd.

``--workers N`` forces what a large fleet gets on its own (`deploy.engine.shards`): the hosts
run in N processes (the run's own and N - 1 workers), and the run says, decides and records
the same as in one process.

- The same report: outcomes, steps, errors, exit code and history as ``--workers 1``, for
  apply and for the rollback of that apply (rollback runs sharded too).
- Rolling batches with max_fail are decided across the workers: a batch whose failures are
  spread over two workers stops the rollout.
- SIGINT to the whole process group (as Ctrl-C at a terminal): the first rolls back the hosts
  mid-change in every worker and exits 1 as today; a second abandons at once (exit 3) naming
  the hosts left mid-run; no worker is left behind.
- A worker killed with SIGKILL: its hosts are reported with one line each, the others finish,
  the run exits non-zero and does not hang.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Deploy, sha256
from tests.integration.test_fleet import broken_check, outcomes, report, write_playbook

WORKER = b"deploy.engine.worker"


def _children(pid: int) -> list[int]:
    """Worker processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and WORKER in argv:
            found.append(int(entry.name))
    return sorted(found)


def _gone(pid: int) -> bool:
    """Exited (a zombie whose parent is dead counts: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_for(condition, seconds: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _popen_group(deploy: Deploy, *args: str) -> subprocess.Popen[str]:
    """``deploy`` as a terminal starts it: the leader of its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "deploy.cli", *args],
        cwd=deploy.workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)},
        start_new_session=True,
    )


def _watched(deploy: Deploy, *args: str) -> tuple[int, str, str, list[int]]:
    """Run ``deploy``; its exit code, stdout, stderr and the worker processes it started
    (seen once the first is up; none had exited before the run ended, checked after)."""
    process = deploy.popen(*args)
    _wait_for(lambda: process.poll() is not None or bool(_children(process.pid)))
    shards = _children(process.pid)
    out, err = process.communicate(timeout=120)
    assert all(_gone(pid) for pid in shards), "none left behind"
    return process.returncode, out, err, shards


def _same(document: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same thing (ids, times)."""
    text = json.dumps(document, sort_keys=True)
    text = text.replace(document["run_id"], "RUN")
    if document.get("target_run"):
        text = text.replace(document["target_run"], "TARGET")
    out = json.loads(text)
    for key in ("started", "duration", "argv", "finished", "timings"):
        out.pop(key, None)
    for host in out["hosts"]:
        for key in ("duration", "ops", "timings", "run_id"):
            host.pop(key, None)
        for step in host.get("steps", []):
            for key in ("duration", "timings", "figures"):
                step.pop(key, None)
    return out


def test_the_same_report_and_history_as_one_process(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9", "0.5.9", "0.5.9", "0.5.9", None])
    (hosts[1].host.root / "broken").write_text("")
    originals = {h.host.name: sha256(h.model_file) for h in hosts[:4]}
    playbook = write_playbook(tmp_path, "same", check=broken_check())

    seen: dict[int, Any] = {}
    for workers in (3, 1):
        code, out, err, shards = _watched(
            deploy, "apply", str(playbook), "--yes", "--json", "--workers", str(workers)
        )
        assert code == 1, out + err
        document = report(out)
        assert outcomes(document) == {
            "gpu-1": "changed",
            "gpu-2": "rolled back",
            "gpu-3": "changed",
            "gpu-4": "changed",
            "gpu-5": "failed",
        }
        shown = deploy("show", document["run_id"], "--json")
        assert shown.exit_code == 0, shown.output
        code, undone, err, undoers = _watched(
            deploy, "rollback", document["run_id"], "--yes", "--json", "--workers", str(workers)
        )
        assert code == 0, undone + err
        assert all(sha256(h.model_file) == originals[h.host.name] for h in hosts[:4])
        seen[workers] = (
            _same(document),
            _same(report(shown.stdout)),
            _same(report(undone)),
            (len(shards), len(undoers)),
            "Traceback" in err,
        )
    assert seen[3][3] == (2, 2) and seen[1][3] == (0, 0), "--workers 3: two worker processes"
    for part in range(3):
        assert seen[3][part] == seen[1][part], part
    assert not seen[3][4] and not seen[1][4]


def test_max_fail_is_decided_across_the_workers(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9"] * 6)
    # Batches of 3: gpu-1..3, gpu-4..6. In batch 1, gpu-2 and gpu-3 fail: two of the three
    # hosts, more than max_fail 1. The three run in three processes (the one with the fewest
    # busy hosts takes the next), so the two failures come from two different processes.
    for broken in (hosts[1], hosts[2]):
        (broken.host.root / "broken").write_text("")
    originals = {h.host.name: sha256(h.model_file) for h in hosts}
    playbook = write_playbook(
        tmp_path, "rolling", check=broken_check(), header="serial: 3\nmax_fail: 1\n"
    )

    result = deploy("apply", str(playbook), "--yes", "--workers", "3", "--forks", "3")

    assert result.exit_code == 1, result.output
    assert "Stopped: batch 1 of 2: 2 of 3 host(s) failed, more than max_fail 1 allows" in (
        result.stdout
    ), result.output
    assert "batch 2 of 2" not in result.stderr
    for kimi in hosts[1:]:
        assert sha256(kimi.model_file) == originals[kimi.host.name], kimi.host.name
    assert sha256(hosts[0].model_file) != originals["gpu-1"]
    for kimi in hosts[3:]:
        assert not kimi.host.state_dir.exists(), "a host of a called-off batch is never touched"


def _held_playbook(tmp_path: Path, check: str) -> Path:
    """A check that holds each host until the test says go, then one more step (never run
    after an interrupt: the host rolls back instead)."""
    path = write_playbook(tmp_path, "held", check=check, timeout=600)
    path.write_text(path.read_text() + "  - name: After\n    verify_command: {run: 'true'}\n")
    return path


@pytest.mark.parametrize("how", ["SIGINT", "--timeout"])
def test_a_first_sigint_or_the_deadline_rolls_back_in_every_worker(  # type: ignore[no-untyped-def]
    make_kimi_hosts, tmp_path: Path, how: str
) -> None:
    hosts, deploy = make_kimi_hosts(["0.5.9"] * 4)
    originals = {h.host.name: sha256(h.model_file) for h in hosts}
    marks, go = tmp_path / "marks", tmp_path / "go"
    marks.mkdir()
    hold = f"touch {marks}/{{{{ inventory_hostname }}}}; while [ ! -e {go} ]; do sleep 0.05; done"
    # The deadline comes once every host is in its check (all four start at once).
    deadline = ["--timeout", "30"] if how == "--timeout" else []
    process = _popen_group(
        deploy, "apply", str(_held_playbook(tmp_path, hold)), "--yes", "--workers", "3", *deadline
    )
    _wait_for(lambda: any(marks.iterdir()))
    first = time.monotonic()  # the run's clock started before this
    _wait_for(lambda: len(list(marks.iterdir())) == 4, 25)
    workers = _children(process.pid)
    assert len(workers) == 2, workers

    if how == "SIGINT":
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        time.sleep(1.0)
    else:
        time.sleep(max(0.0, 31 - (time.monotonic() - first)))
    go.touch()

    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, out + err
    if how == "SIGINT":
        assert "deploy: SIGINT: starting no new step" in err, err
        assert err.count("deploy: SIGINT") == 1, err
    reason = "interrupted by SIGINT" if how == "SIGINT" else "--timeout 30 s expired"
    assert f"{reason} during batch 1 of 1" in err, err
    for kimi in hosts:
        assert sha256(kimi.model_file) == originals[kimi.host.name], kimi.host.name
    assert [line.split()[1:3] for line in out.splitlines() if line.startswith("gpu-")][-4:] == [
        ["rolled", "back"]
    ] * 4, out
    assert "After" not in err, "no step started after the signal"
    assert "Traceback" not in err
    assert all(_gone(pid) for pid in workers)


def test_a_second_sigint_abandons_at_once(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Each host's check runs until the test says go: after the first signal every host is
    # still busy (waiting for its check), so the second one abandons all four.
    _, deploy = make_kimi_hosts(["0.5.9"] * 4)
    marks = tmp_path / "marks"
    marks.mkdir()
    hold = (
        f"trap '' HUP TERM INT; touch {marks}/{{{{ inventory_hostname }}}}; "
        f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done; false"
    )
    playbook = write_playbook(tmp_path, "stuck", check=hold, timeout=600)
    process = _popen_group(deploy, "apply", str(playbook), "--yes", "--workers", "3")
    _wait_for(lambda: len(list(marks.iterdir())) == 4)
    workers = _children(process.pid)
    assert len(workers) == 2, workers

    os.killpg(process.pid, signal.SIGINT)
    time.sleep(1.0)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=30)
    (tmp_path / "go").touch()

    assert process.returncode == 3, out + err
    assert "abandoned at once; left mid-run: " in err, err
    left = re.search(r"left mid-run: ([^.]*)\.", err)
    assert left is not None and left.group(1) == "gpu-1, gpu-2, gpu-3, gpu-4", err
    _wait_for(lambda: all(_gone(pid) for pid in workers), 10)


def test_a_killed_worker_is_reported_and_the_run_ends(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9"] * 4)
    marks = tmp_path / "marks"
    marks.mkdir()
    go = tmp_path / "go"
    hold = f"touch {marks}/{{{{ inventory_hostname }}}}; while [ ! -e {go} ]; do sleep 0.05; done"
    playbook = write_playbook(tmp_path, "killed", check=hold, timeout=600)
    process = deploy.popen("apply", str(playbook), "--yes", "--workers", "3")
    _wait_for(lambda: len(list(marks.iterdir())) == 4)
    victim, survivor = _children(process.pid)

    os.kill(victim, signal.SIGKILL)
    time.sleep(0.5)
    go.touch()
    out, err = process.communicate(timeout=60)

    assert process.returncode == 3, out + err
    run_id = json.loads((hosts[0].host.state_dir / "lock").read_text())["run_id"]
    shown = deploy("show", run_id, "--json")
    document = report(shown.stdout)
    states = outcomes(document)
    lost = sorted(name for name, outcome in states.items() if outcome == "interrupted")
    assert lost and sorted(states.values()).count("changed") == 4 - len(lost), states
    for host in document["hosts"]:
        if host["host"] in lost:
            said = rf"worker process \d \(pid {victim}\) died \(killed by SIGKILL\) while"
            assert re.search(said, host["error"]), host["error"]
            assert re.search(rf"{host['host']}\W.*{said}", err), err
    assert _gone(survivor)
    assert "Traceback" not in err


def test_workers_end_when_the_run_is_killed(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, deploy = make_kimi_hosts(["0.5.9"] * 3)
    marks = tmp_path / "marks"
    marks.mkdir()
    hold = f"touch {marks}/{{{{ inventory_hostname }}}}; while [ ! -e {tmp_path}/go ]; do sleep 0.05; done"
    playbook = write_playbook(tmp_path, "orphans", check=hold, timeout=600)
    process = deploy.popen("apply", str(playbook), "--yes", "--workers", "3")
    _wait_for(lambda: len(list(marks.iterdir())) == 3)
    workers = _children(process.pid)
    assert len(workers) == 2, workers

    process.kill()  # SIGKILL: no handler, no goodbye
    process.communicate(timeout=30)

    _wait_for(lambda: all(_gone(pid) for pid in workers), 10)
    (tmp_path / "go").touch()


def test_a_key_a_worker_finds_on_a_host_is_masked_by_the_run(  # type: ignore[no-untyped-def]
    make_gpu_hosts, tmp_path: Path
) -> None:
    """An operator's server started with ``--api-key KEY`` (in no inventory): the host that
    finds it registers it as a secret (`deploy.services.endpoint`). On a worker's host, the
    run's own process must learn it too: the server's log (``api_key='KEY'`` in its
    ``server_args`` line) is quoted in a failed wait, which the terminal, ``--json``, the log
    file and history show."""
    from deploy.sandbox import gpu_host

    keys = ["sk-own-found-5e3cr3t-never-printed", "sk-worker-found-5e3cr3t-never-printed"]
    gpus, deploy = make_gpu_hosts(["0.5.9", "0.5.9"])
    for gpu, key in zip(gpus, keys, strict=True):  # one host here, one in the worker
        gpu_host.start_old_server(
            gpu, address="127.0.0.7", extra_args=["--host", "127.0.0.7", "--api-key", key]
        )
        gpu.configure(eagle3_load_seconds=8.0)  # the new server is not ready in time
    log = tmp_path / "run.log"
    result = deploy(
        "apply", "kimi-eagle3", "--yes", "--json", "--log-file", str(log), "-v",
        "-e", "sglang_ready_timeout=3", "--workers", "2",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    document = report(result.stdout)
    assert {h["outcome"] for h in document["hosts"]} == {"rolled back"}, result.output
    assert "api_key=" in result.stdout, "the server's log line is quoted (masked)"
    history = deploy("history", "--json")
    for key in keys:
        assert key not in result.output
        assert key not in log.read_text()
        assert key not in history.output


def test_workers_that_cannot_start_leave_the_run_to_its_own_process(  # type: ignore[no-untyped-def]
    make_kimi_hosts, tmp_path: Path
) -> None:
    """``sys.executable`` names no program (a virtualenv removed under a long-lived shell):
    one line says so and the hosts run in the run's own process, as with ``--workers 1``.
    Before, a traceback, exit 1, no report, and history saying every host was left mid-run."""
    hosts, deploy = make_kimi_hosts(["0.5.9"] * 3)
    originals = {h.host.name: sha256(h.model_file) for h in hosts}
    playbook = write_playbook(tmp_path, "unstartable")
    broken = Deploy(deploy.workdir, deploy.inventory, "tests.integration.unstartable_workers")

    result = broken("apply", str(playbook), "--yes", "--json", "--workers", "3")

    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.stderr, result.stderr
    assert "worker process 1 cannot start (/nonexistent/python3: No such file or directory)" in (
        result.stderr
    )
    document = report(result.stdout)
    assert set(outcomes(document).values()) == {"changed"}
    assert all(sha256(h.model_file) != originals[h.host.name] for h in hosts)
    history = deploy("history", "--json")
    assert history.exit_code == 0, history.output
    assert [h["outcome"] for h in json.loads(history.stdout)[0]["hosts"]] == ["changed"] * 3


def test_a_stalled_worker_is_abandoned_by_the_second_sigint(  # type: ignore[no-untyped-def]
    make_kimi_hosts, tmp_path: Path
) -> None:
    """A worker that stalls mid-host (stopped, not dead) holds the run as a stuck host of a
    one-process run does; the second Ctrl-C abandons at once, names its hosts, and the
    stopped worker does not outlive the run (its process group is orphaned: SIGHUP)."""
    _, deploy = make_kimi_hosts(["0.5.9"] * 4)
    marks, go = tmp_path / "marks", tmp_path / "go"
    marks.mkdir()
    hold = f"touch {marks}/{{{{ inventory_hostname }}}}; while [ ! -e {go} ]; do sleep 0.05; done"
    process = _popen_group(
        deploy, "apply", str(_held_playbook(tmp_path, hold)), "--yes", "--workers", "3"
    )
    _wait_for(lambda: len(list(marks.iterdir())) == 4)
    stalled, other = _children(process.pid)
    os.kill(stalled, signal.SIGSTOP)

    os.killpg(process.pid, signal.SIGINT)
    go.touch()  # every host but the stalled worker's rolls back
    time.sleep(3.0)
    assert process.poll() is None, "the stalled worker's host is waited for"
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=30)

    assert process.returncode == 3, out + err
    assert "abandoned at once; left mid-run: " in err, err
    _wait_for(lambda: _gone(stalled) and _gone(other), 10)
