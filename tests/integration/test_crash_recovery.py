"""A run that dies half-way (SIGKILL, or its own --timeout) is undone by the next one (issue 4).

The killed run leaves the host's file changed and its journal without an end; its lock dies
with its SSH session — or, when the run died while a command of its was running on the host,
when that command ends, so no other run can undo the file under a still-running check or
restart — and the holder's description stays behind naming a dead run (a stale lock). `deploy status` shows both; the next `deploy apply` on the host undoes the dead run
first (reported under "recovered"), then applies again.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.integration.conftest import KimiHost, sha256
from tests.integration.test_fleet import report, write_playbook


def _journal(kimi: KimiHost, run_id: str) -> list[dict]:  # type: ignore[type-arg]
    text = (kimi.runs_dir / run_id / "journal.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _wait_for_change(kimi: KimiHost, before: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while sha256(kimi.model_file) == before:
        assert time.monotonic() < deadline, "the run never changed the file"
        time.sleep(0.02)


def _wait_for_file(path: Path, seconds: float = 20) -> None:
    """Until ``path`` exists: the run's writes are sent without waiting, so the file changes
    before the client has necessarily sent the command that follows them."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_sigkilled_run_is_undone_by_the_next_apply(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    original = sha256(kimi.model_file)
    # The check runs until the test says go: the dead run's lock is held for as long as the
    # test needs it, however slow the commands below are on a loaded machine (a `sleep 4`
    # could end before them).
    started, go = tmp_path / "check-started", tmp_path / "check-go"
    hold = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done"
    hanging = write_playbook(tmp_path, "hangs", check=hold)
    quick = write_playbook(tmp_path, "hangs-not")

    victim = deploy.popen("apply", str(hanging), "--yes")
    _wait_for_change(kimi, original)
    _wait_for_file(started)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)  # reaps it and closes its pipes
    patched = sha256(kimi.model_file)
    (dead_run,) = kimi.runs()
    assert _journal(kimi, dead_run)[-1]["event"] != "end", "the killed run left no end"

    plan = deploy("apply", str(quick), "--check")
    assert f"first: run {dead_run} (hangs, started" in plan.stdout
    assert "was interrupted mid-change: it will be undone first" in plan.stdout, plan.output
    assert sha256(kimi.model_file) == patched, "--check undoes nothing"

    status = deploy("status", "--json")
    assert status.exit_code == 0, status.output
    (seen,) = json.loads(status.stdout)
    assert seen["lock"] == "held", "the dead run's check still runs, and keeps the lock"
    go.touch()
    deadline = time.monotonic() + 20
    while seen["lock"] == "held":
        assert time.monotonic() < deadline, "the lock outlived the dead run's last command"
        time.sleep(0.2)
        (seen,) = json.loads(deploy("status", "--json").stdout)
    assert seen["lock"] == "stale" and seen["lock_holder"]["run_id"] == dead_run
    assert [r["run_id"] for r in seen["unfinished"]] == [dead_run]
    human = deploy("status")
    assert f"run {dead_run}" in human.stdout and "undoes it first" in human.stdout
    assert "died mid-run" in human.stdout

    result = deploy("apply", str(quick), "--yes", "--json")

    assert result.exit_code == 0, result.output
    (host,) = report(result.stdout)["hosts"]
    assert host["outcome"] == "changed"
    takeover, recovered = host["recovered"]
    assert takeover.startswith(f"took over the lock from run {dead_run}, which died mid-run")
    assert recovered.startswith(f"run {dead_run}: restored {kimi.model_file}")
    assert sha256(kimi.model_file) == patched, "undone to the original, then applied again"
    assert _journal(kimi, dead_run)[-1] == {
        **_journal(kimi, dead_run)[-1],
        "event": "rollback_end",
        "outcome": "rolled_back",
    }
    assert len(kimi.runs()) == 2
    assert json.loads(deploy("status", "--json").stdout)[0]["unfinished"] == []


def test_timeout_cancels_a_busy_host_which_rolls_back(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 13: --timeout cancels busy hosts (no new step, undo) instead of abandoning them."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    original = kimi.model_file.read_bytes()
    hanging = write_playbook(tmp_path, "hangs", check="sleep 4")

    began = time.monotonic()
    result = deploy("apply", str(hanging), "--yes", "--json", "--timeout", "2")
    took = time.monotonic() - began

    assert result.exit_code == 1, result.output
    assert took < 20, f"--timeout 2 took {took:.1f} s, as if it waited for the 30 s step"
    (host,) = report(result.stdout)["hosts"]
    assert host["outcome"] == "rolled back"
    assert "--timeout 2 s expired" in host["error"], host["error"]
    assert kimi.model_file.read_bytes() == original, "undone by this run, not left for the next"
    assert json.loads(deploy("status", "--json").stdout)[0]["unfinished"] == []
