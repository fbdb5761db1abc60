"""Undo you can trust (issue 13), over real sshd: each case the issue reproduced, and what the
host holds afterwards. Every case is a row of docs/reliability.md (`record`).

The oracle reads the host's disk (the model file's sha256, the journals) and the kernel (which
server listens), never what deploy says.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.conftest import FILES_ONLY, LEDGER, REPO, FaultHost, Record
from tests.integration.conftest import Deploy

APPEND = """\
name: release-2
hosts: all
steps:
  - append: {path: "{{ model_file }}", text: "# release 2\\n"}
"""

#: Insert, then a slow check, then an append: a signal during the check lands mid-change.
SLOW = """\
name: slow
hosts: all
steps:
  - python_insert:
      path: "{{ model_file }}"
      class: KimiK25ForConditionalGeneration
      code: |
        def get_embed_and_head(self):
            return self.language_model.get_embed_and_head()
  - verify_command: {run: "sleep 3"}
  - append: {path: "{{ model_file }}", text: "# slow\\n"}
"""


#: As SLOW, but the check waits for a file the test creates: the run cannot end on its own
#: between two signals, however loaded the machine is.
GATED = SLOW.replace('run: "sleep 3"', 'run: "while [ ! -e {{ gate }} ]; do sleep 0.05; done"')


def playbook(host: FaultHost, text: str, name: str) -> str:
    path = host.deploy.workdir / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def record(
    host: FaultHost,
    tried: str,
    command: str,
    exit_code: int,
    *,
    expect: str,
    ok: bool,
    service: str | None = None,
    note: str = "",
) -> Record:
    """One row: what was tried, the command after it, what the host holds now."""
    state = host.file_state()
    svc = service if service is not None else host.service_state()
    row = Record(
        fault="undo",
        point=tried,
        next_command=command,
        fault_exit=exit_code,
        fault_outcome="",
        next_exit=exit_code,
        file_state=state,
        service_state=svc,
        consistent=ok and state == expect,
        truthful=ok,
        bytes_lost=host.bytes_lost(),
        note=note,
    )
    LEDGER.add(row)
    return row


def run_ids(host: FaultHost) -> list[str]:
    """This host's runs in the order they began (their journals' host_seq)."""
    seqs = {}
    for run in host.runs():
        first = (host.state_dir / "runs" / run / "journal.jsonl").read_text().splitlines()[0]
        seqs[run] = json.loads(first).get("host_seq", 0)
    return sorted(seqs, key=seqs.__getitem__)


def test_a_refused_rollback_sets_up_no_automatic_undo(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    assert host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    patched = host.model_file.read_bytes()
    host.model_file.write_bytes(patched + b"# an operator's edit\n")
    refused = host.deploy("rollback", "--yes")
    assert refused.exit_code == 3 and "nothing was changed" in refused.output, refused.output
    assert host.model_file.read_bytes() == patched + b"# an operator's edit\n"
    host.model_file.write_bytes(patched)  # the operator takes the edit back
    other = host.deploy("apply", playbook(host, APPEND, "release-2"), "--yes")
    ok = other.exit_code == 0 and host.model_file.read_bytes() == patched + b"# release 2\n"
    record(
        host,
        "rollback refused (file changed by hand), then apply of another playbook",
        "apply",
        other.exit_code,
        expect="other",
        ok=ok,
        note="the release stays; the next apply undid nothing",
    )
    assert ok, other.output
    status = json.loads(host.deploy("status", "--json").stdout)[0]
    assert status["unfinished"] == []


def test_two_runs_in_one_second_roll_back_the_newer(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    """Ids that sort the wrong way as text: the journals' order decides."""
    host: FaultHost = make_fault_host()
    assert host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    assert host.deploy("apply", playbook(host, APPEND, "release-2"), "--yes").exit_code == 0
    first, _second = run_ids(host)
    runs = host.state_dir / "runs"
    (runs / first).rename(runs / ("99999999T999999.999999Z-" + first[-6:]))  # sorts last as text
    result = host.deploy("rollback", "--yes")
    ok = result.exit_code == 0 and host.model_file.read_bytes() == host.patched
    record(
        host,
        "two runs whose ids sort the wrong way as text",
        "rollback",
        result.exit_code,
        expect="after",
        ok=ok,
        note="the newer run was undone, the older one stands",
    )
    assert ok, result.output


def test_a_damaged_journal_line_refuses_the_rollback(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    assert host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    (run,) = host.runs()
    journal = host.state_dir / "runs" / run / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"size":', b'"size":1', 1)  # the write intent, not the last
    journal.write_bytes(b"\n".join(lines))
    damaged = journal.read_bytes()
    result = host.deploy("rollback", "--yes")
    ok = (
        result.exit_code == 3
        and f"{journal}:3: journal damaged" in result.output
        and host.file_state() == "after"
        and journal.read_bytes() == damaged
    )
    record(
        host,
        "journal line 3 of 5 damaged",
        "rollback",
        result.exit_code,
        expect="after",
        ok=ok,
        note="refused naming file:line; file and journal untouched",
    )
    assert ok, result.output


def test_an_older_run_is_refused_then_undone_in_stack_order(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    assert host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    assert host.deploy("apply", playbook(host, APPEND, "release-2"), "--yes").exit_code == 0
    first, second = run_ids(host)
    for force in ((), ("--force",)):
        refused = host.deploy("rollback", first, "--yes", *force)
        assert refused.exit_code == 3, refused.output
        assert second in refused.output and "foreign" not in refused.output.lower()
        assert host.model_file.read_bytes() == host.patched + b"# release 2\n"
    newer = host.deploy("rollback", "--yes")
    older = host.deploy("rollback", first, "--yes")
    again = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    ok = newer.exit_code == older.exit_code == again.exit_code == 0
    record(
        host,
        "rollback of an older run (also --force), then the newer, then the older",
        "rollback, rollback, apply",
        again.exit_code,
        expect="after",
        ok=ok and host.file_state() == "after",
        note="refused listing the later run; stack order worked; apply after it fine",
    )
    assert ok, newer.output + older.output + again.output


def test_fleet_rollback_retry_finishes_the_same_run(make_fault_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts: list[FaultHost] = [make_fault_host(name=f"gpu-{i}") for i in (1, 2, 3)]
    workdir = tmp_path / "fleet"
    workdir.mkdir()
    (workdir / "playbooks").symlink_to(REPO / "playbooks")
    merged: dict[str, object] = {}
    for host in hosts:
        merged.update(yaml.safe_load(host.inventory.read_text())["hosts"])
    document = yaml.safe_load(hosts[0].inventory.read_text())
    document.update(hosts=merged, groups={"gpu": list(merged)})
    inventory = workdir / "hosts.yaml"
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    fleet = Deploy(workdir, inventory)
    (workdir / "release-2.yaml").write_text(APPEND)
    assert fleet("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    assert fleet("apply", str(workdir / "release-2.yaml"), "--yes").exit_code == 0
    down = hosts[2]
    down.proxy.retarget(closed_port())
    partial = fleet("rollback", "--yes")
    assert partial.exit_code == 4, partial.output
    down.proxy.retarget(down.ssh.port)
    retry = fleet("rollback", "--yes")
    files = [h.model_file.read_bytes() == h.patched for h in hosts]
    ok = retry.exit_code == 0 and all(files)
    for host in hosts:
        record(
            host,
            "fleet rollback with gpu-3 down, retried once it is back",
            "rollback",
            retry.exit_code,
            expect="after",
            ok=ok,
            note="release 2 undone everywhere; release 1 untouched",
        )
    assert ok, partial.output + retry.output
    assert "already rolled back" in retry.output
    history = json.loads(fleet("history", "--json").stdout)
    rollbacks = [run for run in history if run["command"] == "rollback"]
    assert {run["target_run"] for run in rollbacks} == {history[1]["run_id"]}
    assert f"rollback of run {history[1]['run_id']} (release-2)" in retry.stdout


def closed_port() -> int:
    """A port nothing listens on: reserved for this process, so no sandbox server takes it."""
    from deploy.sandbox.ports import free_port

    return free_port()


def test_a_missing_saved_copy_stops_nothing(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host(service=True, load_seconds=0.5)
    applied = host.deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    assert host.service_state() == "new"
    (run,) = host.runs()
    for copy in (host.state_dir / "runs" / run / "files").iterdir():
        copy.unlink()
    result = host.deploy("rollback", "--yes")
    ok = (
        result.exit_code == 3
        and "is missing" in result.output
        and "Traceback" not in result.output
        and host.service_state() == "new"
        and host.file_state() == "after"
    )
    record(
        host,
        "saved copy deleted from state_dir, service in the run",
        "rollback",
        result.exit_code,
        expect="after",
        ok=ok,
        note="preflight refused before stopping the server: still new and serving",
    )
    assert ok, result.output
    assert host.healthy()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_rolls_back_and_reports(make_fault_host, signum: int) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    process = host.deploy.popen("apply", playbook(host, SLOW, "slow"), "--yes", "--json")
    wait_for(lambda: host.file_state() != "before")
    os.kill(process.pid, signum)
    out, err = process.communicate(timeout=60)
    report = json.loads(out)
    (result,) = report["hosts"]
    ok = (
        process.returncode == 1
        and result["outcome"] == "rolled back"
        and host.file_state() == "before"
    )
    history = json.loads(host.deploy("history", "--json").stdout)
    record(
        host,
        f"{signal.Signals(signum).name} during a step after the first change",
        "(the same apply)",
        process.returncode,
        expect="before",
        ok=ok and history[-1]["run_id"] == report["run_id"],
        note="no new step; the change was rolled back; report and history written",
    )
    assert ok, out + err
    assert history[-1]["hosts"][0]["outcome"] == "rolled back"


def test_second_sigint_abandons_and_names_the_recovery(make_fault_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No timing assumption: the second signal is sent only once the first was handled (its
    message read; two signals sent close together can reach Python as one), and the run is
    held mid-change by a check that waits for a file until then."""
    host: FaultHost = make_fault_host()
    gate = tmp_path / "go"
    process = host.deploy.popen(
        "apply", playbook(host, GATED, "gated"), "--yes", "-e", f"gate={gate}"
    )
    wait_for(lambda: host.file_state() != "before", seconds=120)
    os.kill(process.pid, signal.SIGINT)
    assert process.stderr is not None
    first = process.stderr.readline()
    while first and "SIGINT" not in first:
        first = process.stderr.readline()
    assert "SIGINT" in first, "the first signal was handled and said so"
    os.kill(process.pid, signal.SIGINT)
    out, rest = process.communicate(timeout=60)
    err = first + rest
    gate.touch()  # the host's check ends, its shell leaves, the lock is free
    named = "gpu-1" in err and "deploy rollback" in err
    wait_for(lambda: not lock_held(host), seconds=60)
    undo = host.deploy("rollback", "--yes")
    ok = process.returncode == 3 and named and undo.exit_code == 0
    record(
        host,
        "second SIGINT: abandon at once",
        "rollback",
        undo.exit_code,
        expect="before",
        ok=ok and host.file_state() == "before",
        note="exit 3 naming the host and `deploy rollback`; that command recovered it",
    )
    assert ok, out + err + undo.output


def lock_held(host: FaultHost) -> bool:
    seen = json.loads(host.deploy("status", "--json").stdout)[0]
    return bool(seen["lock"] == "held")


def wait_for(condition, seconds: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
