"""Every file step's plan, apply, verify and undo, on a `LocalHost` (no sshd).

Each case is a small playbook run by the real engine on a file in a private temporary
directory: ``--check`` (the plans: a diff, nothing touched), apply (the bytes written, mode
kept, the journal), a re-run (no change), ``deploy rollback`` (undo: the original bytes and
mode back), and a failing verification after the change (automatic rollback).
"""

from __future__ import annotations

import ast
import hashlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.local_rig import LocalRig

SOURCE = b'''"""A module the steps change."""


class Greeter:
    def hello(self):
        return "hello"


ENTRY = [Greeter]
'''

PATCH = (
    "--- a/target.py\n"
    "+++ b/target.py\n"
    "@@ -5,3 +5,3 @@\n"
    "     def hello(self):\n"
    '-        return "hello"\n'
    '+        return "hi"\n'
    " \n"
)


def greeter_methods(source: bytes) -> list[str]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    return [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]


@dataclass
class Change:
    """A mutating step and the bytes it must leave."""

    kind: str
    args: dict[str, Any]
    expected: bytes


CHANGES = [
    Change(
        "python_insert",
        {"class": "Greeter", "code": "def bye(self):\n    return 'bye'\n"},
        SOURCE.replace(
            b'        return "hello"\n',
            b"        return \"hello\"\n\n    def bye(self):\n        return 'bye'\n",
        ),
    ),
    Change("patch", {"diff": PATCH}, SOURCE.replace(b'return "hello"', b'return "hi"')),
    Change("append", {"text": "# appended\n"}, SOURCE + b"# appended\n"),
]


@pytest.fixture
def rig(tmp_path: Path) -> LocalRig:
    rig = LocalRig(tmp_path / "host")
    target = rig.files / "target.py"
    target.write_bytes(SOURCE)
    os.chmod(target, 0o640)
    rig.write_inventory(target=str(target), python=sys.executable)
    return rig


def target(rig: LocalRig) -> Path:
    return rig.files / "target.py"


def step(kind: str, **args: Any) -> dict[str, Any]:
    path = {} if kind == "verify_command" else {"path": "{{ target }}"}
    return {"name": kind, kind: {**path, **args}}


@pytest.mark.parametrize("change", CHANGES, ids=[c.kind for c in CHANGES])
def test_a_change_plans_applies_reruns_and_undoes(rig: LocalRig, change: Change) -> None:
    playbook = rig.playbook(change.kind, [step("backup"), step(change.kind, **change.args)])

    planned = rig.apply(playbook, check=True)
    assert planned.hosts[0].outcome == "would change"
    (diffed,) = [s for s in planned.hosts[0].steps if s.diff]
    assert diffed.kind == change.kind and diffed.status == "would change"
    assert target(rig).read_bytes() == SOURCE and not rig.state_dir.exists()

    applied = rig.apply(playbook)
    assert applied.exit_code == 0, applied.hosts[0].error
    assert [s.status for s in applied.hosts[0].steps] == ["ok", "changed"]
    assert target(rig).read_bytes() == change.expected
    assert stat.S_IMODE(target(rig).stat().st_mode) == 0o640
    (run_id,) = rig.runs()
    journal = rig.journal(run_id)
    assert [e["event"] for e in journal] == ["begin", "backup", "intent", "done", "end"]
    intent = journal[2]
    assert intent["path"] == str(target(rig))
    assert intent["after"] == hashlib.sha256(change.expected).hexdigest()
    saved = rig.state_dir / "runs" / run_id / "files" / hashlib.sha256(SOURCE).hexdigest()
    assert saved.read_bytes() == SOURCE

    again = rig.apply(playbook)
    assert again.exit_code == 0 and again.hosts[0].outcome == "unchanged"
    assert [s.status for s in again.hosts[0].steps] == ["unchanged", "unchanged"]
    assert rig.runs() == [run_id]

    undone = rig.rollback(run_id)
    assert undone.exit_code == 0 and undone.hosts[0].outcome == "restored"
    assert target(rig).read_bytes() == SOURCE
    assert stat.S_IMODE(target(rig).stat().st_mode) == 0o640


def test_backup_alone_saves_nothing_when_nothing_changes(rig: LocalRig) -> None:
    run = rig.apply(rig.playbook("backup", [step("backup")]))
    assert run.exit_code == 0 and run.hosts[0].outcome == "unchanged"
    assert run.hosts[0].steps[0].status == "unchanged"
    assert rig.runs() == [], "no change, no copy, no run left on the host"


def test_a_missing_file_fails_and_touches_nothing(rig: LocalRig) -> None:
    rig.write_inventory(target=str(rig.files / "absent.py"))
    run = rig.apply(rig.playbook("absent", [step("append", text="x\n")]))
    assert run.exit_code == 1
    assert "does not exist" in run.hosts[0].steps[0].summary
    assert not (rig.files / "absent.py").exists()
    assert target(rig).read_bytes() == SOURCE


APPEND = step("append", text="# appended\n")

#: (verification step, whether it holds after APPEND)
VERIFIES = [
    ("verify_tail", step("verify_tail", last_line="# appended"), True),
    ("verify_tail", step("verify_tail", last_line="ENTRY = [Greeter]"), False),
    (
        "verify_python",
        step(
            "verify_python",
            python="{{ python }}",
            compiles=True,
            class_has={"Greeter": ["hello"]},
            not_module_level=["hello"],
        ),
        True,
    ),
    ("verify_python", step("verify_python", class_has={"Greeter": ["bye"]}), False),
    ("verify_python", step("verify_python", last_statement="ENTRY = [Greeter]"), True),
    (
        "verify_command",
        step("verify_command", run="tail -n 1 {{ target }}", expect_stdout="appended"),
        True,
    ),
    ("verify_command", step("verify_command", run="grep -q nowhere {{ target }}"), False),
]


@pytest.mark.parametrize(
    ("kind", "check", "holds"),
    VERIFIES,
    ids=[
        f"{kind}-{'holds' if holds else 'fails'}-{i}" for i, (kind, _, holds) in enumerate(VERIFIES)
    ],
)
def test_a_verification_passes_or_rolls_the_change_back(
    rig: LocalRig, kind: str, check: dict[str, Any], holds: bool
) -> None:
    run = rig.apply(rig.playbook("verified", [step("backup"), APPEND, check]))
    (run_id,) = rig.runs()
    events = rig.events(run_id)
    if holds:
        assert run.exit_code == 0, run.hosts[0].steps[-1].summary
        assert [s.status for s in run.hosts[0].steps] == ["ok", "changed", "ok"]
        assert target(rig).read_bytes() == SOURCE + b"# appended\n"
        assert events[-1] == "end" and "undone" not in events
        return
    assert run.exit_code == 1
    host = run.hosts[0]
    assert host.outcome == "rolled back"
    assert host.steps[-1].kind == kind and host.steps[-1].status == "failed"
    assert target(rig).read_bytes() == SOURCE, "undo restored the bytes"
    assert stat.S_IMODE(target(rig).stat().st_mode) == 0o640, "and the mode"
    assert "undone" in events and rig.journal(run_id)[-1]["outcome"] == "rolled_back"


def test_python_insert_keeps_the_method_inside_the_class(rig: LocalRig) -> None:
    insert = step("python_insert", **{"class": "Greeter", "code": "def bye(self):\n    pass\n"})
    assert rig.apply(rig.playbook("insert", [insert])).exit_code == 0
    assert greeter_methods(target(rig).read_bytes()) == ["hello", "bye"]
    assert target(rig).read_bytes().rstrip().endswith(b"ENTRY = [Greeter]")
