"""The throwaway step of ``tests/unit/test_step_registration.py`` runs on a real host.

Registered through the public path and nothing else, it is planned, applied and verified by
the engine like any built-in step; when a later step fails, its own journal record (``intent``
op ``stamp``) is dispatched to its own undo handler and the host is put back, as is a file a
built-in step changed in the same run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.config.load import load_inventory, load_playbook
from deploy.config.resolve import resolve
from deploy.engine.host_run import RunOptions, apply_host
from deploy.engine.journal import new_run_id
from deploy.engine.results import HostResult
from deploy.sandbox.sshd import SshdSandbox
from tests.unit.test_step_registration import stamp  # noqa: F401 (a fixture, used by name)

#: Every test here runs with the throwaway step registered (the unit test's fixture).
pytestmark = pytest.mark.usefixtures("stamp")


PLAYBOOK = """\
name: stamped
hosts: all
steps:
  - append: {path: "{{ conf }}", text: "added=1\\n"}
  - stamp: {path: "{{ marker }}", text: hello}
  - verify_command: {run: "{{ check }}"}
"""


def _run(sshd_sandbox: SshdSandbox, tmp_path: Path, check: str) -> tuple[HostResult, Path, Path]:
    host = sshd_sandbox.start("gpu-1")
    conf, marker = host.root / "app.conf", host.root / "marker"
    conf.write_text("base=0\n")
    inventory = sshd_sandbox.write_inventory(
        tmp_path / "hosts.yaml",
        [host],
        host_vars={host.name: {"conf": str(conf), "marker": str(marker), "check": check}},
    )
    playbook = tmp_path / "stamped.yaml"
    playbook.write_text(PLAYBOOK)
    (plan,) = resolve(load_inventory(inventory), load_playbook(playbook))
    result = apply_host(plan, RunOptions(run_id=new_run_id(), playbook="stamped"))
    return result, conf, marker


def test_a_registered_step_runs_on_a_host(sshd_sandbox: SshdSandbox, tmp_path: Path) -> None:
    result, conf, marker = _run(sshd_sandbox, tmp_path, check="true")
    assert result.outcome == "changed", result.error
    assert marker.read_text() == "hello"
    assert conf.read_text() == "base=0\nadded=1\n"
    statuses = [(s.kind, s.status) for s in result.steps]
    assert statuses == [("append", "changed"), ("stamp", "ok"), ("verify_command", "ok")]


def test_a_registered_steps_change_is_undone_by_its_own_handler(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> None:
    result, conf, marker = _run(sshd_sandbox, tmp_path, check="false")
    assert result.outcome == "rolled back", result.error
    assert not marker.exists(), "the stamp's undo removed its marker"
    assert conf.read_text() == "base=0\n", "the file step's undo restored the file"
    lines = result.rollback
    assert lines[0] == f"removed {marker}", "newest change undone first"
    assert lines[1].startswith(f"restored {conf} (sha256 ")
    assert len(lines) == 2
    (run_dir,) = (p for p in (tmp_path / "sandbox").rglob("journal.jsonl"))
    events = [json.loads(line) for line in run_dir.read_text().splitlines()]
    intents = [(e["op"], e["path"]) for e in events if e["event"] == "intent"]
    assert intents == [("write", str(conf)), ("stamp", str(marker))]
    undone = [(e["op"], e["action"]) for e in events if e["event"] == "undone"]
    assert undone == [("stamp", "removed"), ("write", "restored")]
