"""lineinfile, copy and template on `LocalHost`: plan, apply, re-run, undo, on real files.

The integration suite runs the same over real sshd (tests/integration/test_put_steps.py);
these cover the cases quickly: a created file removed by undo, created directories, a
metadata-only change undone, validate, create_dirs refused, and the load-time errors.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from deploy.errors import InputError
from tests.unit.local_rig import LocalRig

ENV = b"A=1\r\nPORT=80\r\n"


@pytest.fixture
def rig(tmp_path: Path) -> LocalRig:
    rig = LocalRig(tmp_path / "host")
    env = rig.files / "server.env"
    env.write_bytes(ENV)
    os.chmod(env, 0o640)
    rig.write_inventory(etc=str(rig.files), port="8080")
    return rig


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_three_steps_apply_rerun_and_roll_back(rig: LocalRig) -> None:
    (rig.workstation / "templates").mkdir()
    (rig.workstation / "templates" / "app.conf.j2").write_text(
        "host={{ inventory_hostname }}\nport={{ port }}\n"
    )
    playbook = rig.playbook(
        "three",
        [
            {
                "lineinfile": {
                    "path": "{{ etc }}/server.env",
                    "regexp": "^PORT=",
                    "line": "PORT={{ port }}",
                }
            },
            {
                "copy": {
                    "content": "token\n",
                    "dest": "{{ etc }}/new/deep/token",
                    "mode": "0600",
                    "create_dirs": True,
                }
            },
            {"template": {"src": "templates/app.conf.j2", "dest": "{{ etc }}/app.conf"}},
        ],
    )
    env, token, conf = (
        rig.files / "server.env",
        rig.files / "new" / "deep" / "token",
        rig.files / "app.conf",
    )
    planned = rig.apply(playbook, check=True)
    assert planned.hosts[0].outcome == "would change", planned.hosts[0].error
    assert not token.exists() and not rig.state_dir.exists()

    applied = rig.apply(playbook)
    assert applied.exit_code == 0, applied.hosts[0].error
    assert [s.status for s in applied.hosts[0].steps] == ["changed"] * 3
    assert env.read_bytes() == b"A=1\r\nPORT=8080\r\n" and mode_of(env) == 0o640
    assert token.read_bytes() == b"token\n" and mode_of(token) == 0o600
    assert conf.read_text() == "host=local-1\nport=8080\n" and mode_of(conf) == 0o644
    (run_id,) = rig.runs()
    ops = [(e["event"], e.get("op")) for e in rig.journal(run_id)]
    assert ("intent", "mkdir") in ops and ("intent", "create") in ops

    again = rig.apply(playbook)
    assert again.hosts[0].outcome == "unchanged", [s.summary for s in again.hosts[0].steps]
    assert rig.apply(playbook, check=True).hosts[0].outcome == "unchanged"

    undone = rig.rollback(run_id)
    assert undone.exit_code == 0, undone.hosts[0].error
    assert env.read_bytes() == ENV and mode_of(env) == 0o640
    assert not token.exists() and not conf.exists()
    assert not (rig.files / "new").exists(), "the directories the run made are gone"


def test_a_missing_directory_is_an_error_without_create_dirs(rig: LocalRig) -> None:
    playbook = rig.playbook("nodir", [{"copy": {"content": "x", "dest": "{{ etc }}/no/x"}}])
    run = rig.apply(playbook)
    assert run.exit_code == 1
    assert "create_dirs: true" in run.hosts[0].steps[0].summary
    assert not (rig.files / "no").exists() and rig.runs() == []


def test_mode_only_change_is_undone(rig: LocalRig) -> None:
    env = rig.files / "server.env"
    playbook = rig.playbook(
        "mode",
        [{"copy": {"content": ENV.decode(), "dest": "{{ etc }}/server.env", "mode": "0600"}}],
    )
    run = rig.apply(playbook)
    assert run.exit_code == 0 and run.hosts[0].steps[0].summary == "changes mode 0640 -> 0600"
    assert mode_of(env) == 0o600 and env.read_bytes() == ENV
    assert rig.apply(playbook).hosts[0].outcome == "unchanged"
    (run_id,) = rig.runs()
    assert rig.rollback(run_id).exit_code == 0
    assert mode_of(env) == 0o640 and env.read_bytes() == ENV


def test_an_edit_after_a_create_is_undone_by_removal(rig: LocalRig) -> None:
    created = rig.files / "fresh.conf"
    playbook = rig.playbook(
        "create-then-edit",
        [
            {"lineinfile": {"path": "{{ etc }}/fresh.conf", "line": "a=1", "create": True}},
            {"append": {"path": "{{ etc }}/fresh.conf", "text": "b=2\n"}},
        ],
    )
    assert rig.apply(playbook, check=True).hosts[0].outcome == "would change"
    run = rig.apply(playbook)
    assert run.exit_code == 0, run.hosts[0].error
    assert created.read_bytes() == b"a=1\nb=2\n"
    (run_id,) = rig.runs()
    assert rig.rollback(run_id).exit_code == 0
    assert not created.exists()


def test_a_created_file_someone_changed_is_not_removed(rig: LocalRig) -> None:
    created = rig.files / "fresh.conf"
    playbook = rig.playbook(
        "create", [{"lineinfile": {"path": "{{ etc }}/fresh.conf", "line": "a=1", "create": True}}]
    )
    assert rig.apply(playbook).exit_code == 0
    created.write_bytes(b"theirs\n")
    (run_id,) = rig.runs()
    refused = rig.rollback(run_id)
    assert refused.exit_code == 3 and "changed since deploy created it" in str(
        refused.hosts[0].error
    )
    assert created.read_bytes() == b"theirs\n"
    assert rig.rollback(run_id, force=True).exit_code == 0 and not created.exists()


@pytest.mark.parametrize(
    ("validate", "ok"),
    [("grep -q '^PORT=' %s", True), ("grep -q '^NOPE=' %s", False)],
)
def test_validate_gates_the_write(tmp_path: Path, validate: str, ok: bool) -> None:
    # A state_dir whose path needs quoting: validate's %s is the quoted path of the copy.
    rig = LocalRig(tmp_path / "it's a host")
    env = rig.files / "server.env"
    env.write_bytes(ENV)
    os.chmod(env, 0o640)
    rig.write_inventory(etc=str(rig.files))
    playbook = rig.playbook(
        "validate",
        [{"copy": {"content": "PORT=1\n", "dest": "{{ etc }}/server.env", "validate": validate}}],
    )
    run = rig.apply(playbook)
    assert not list(rig.state_dir.glob("validate.*")), "the copy it checked is removed"
    if ok:
        assert run.exit_code == 0 and env.read_bytes() == b"PORT=1\n"
        return
    assert run.exit_code == 1 and run.hosts[0].outcome == "failed"
    assert "validate `grep -q '^NOPE=' %s` exited 1" in run.hosts[0].steps[0].summary
    assert env.read_bytes() == ENV and mode_of(env) == 0o640
    assert rig.runs() == [], "refused before anything was journaled: nothing to undo"


def test_lineinfile_on_a_missing_file_without_create_fails(rig: LocalRig) -> None:
    playbook = rig.playbook("missing", [{"lineinfile": {"path": "{{ etc }}/none", "line": "x"}}])
    run = rig.apply(playbook)
    assert run.exit_code == 1 and "create: true" in run.hosts[0].steps[0].summary


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"src": "files/absent.txt"}, "src not found"),
        ({"src": "files/a.txt", "content": "x"}, "give exactly one of 'src' or 'content'"),
        ({"content": "x", "mode": 644}, "quote the octal mode"),
        ({"content": "x", "mode": "u+rw"}, "not an octal mode"),
        ({"content": "x", "validate": "visudo -cf"}, "exactly one %s"),
        ({"content": "x", "owner": "bad name"}, "not a user or group name"),
    ],
)
def test_bad_copy_input_is_one_line_at_its_position(
    rig: LocalRig, args: dict[str, Any], message: str
) -> None:
    (rig.workstation / "files").mkdir()
    (rig.workstation / "files" / "a.txt").write_text("a\n")
    playbook = rig.playbook("bad", [{"copy": {"dest": "{{ etc }}/x", **args}}])
    with pytest.raises(InputError) as caught:
        rig.apply(playbook)
    text = str(caught.value)
    assert "\n" not in text and message in text
    assert text.startswith(f"{playbook}:"), text
    assert rig.runs() == [] and not (rig.files / "x").exists()


def test_a_template_with_an_undefined_variable_is_bad_input(rig: LocalRig) -> None:
    (rig.workstation / "t.j2").write_text("x={{ nowhere }}\n")
    playbook = rig.playbook("tpl", [{"template": {"src": "t.j2", "dest": "{{ etc }}/t"}}])
    with pytest.raises(InputError, match=r"t\.j2: undefined variable 'nowhere'"):
        rig.apply(playbook)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"line": "a\nb"}, "single line"),
        ({"regexp": "(", "line": "x"}, r"lineinfile.regexp: not a regular expression"),
        ({"line": "x", "insertafter": "a", "insertbefore": "b"}, "at most one"),
        ({"line": "x", "backrefs": True}, "backrefs needs 'regexp'"),
        ({"state": "absent"}, "needs 'regexp' or 'line'"),
    ],
)
def test_bad_lineinfile_input(rig: LocalRig, args: dict[str, Any], message: str) -> None:
    playbook = rig.playbook("bad", [{"lineinfile": {"path": "{{ etc }}/server.env", **args}}])
    with pytest.raises(InputError, match=message):
        rig.apply(playbook)


@pytest.mark.parametrize("create", [True, False], ids=["new file", "existing file"])
def test_a_directory_others_can_write_is_refused_unless_unsafe_dir(
    rig: LocalRig, create: bool
) -> None:
    shared = rig.files / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    target = shared / "x.conf"
    if not create:
        target.write_bytes(b"old\n")
    step: dict[str, Any] = {"copy": {"content": "new\n", "dest": str(target)}}
    refused = rig.apply(rig.playbook("shared", [step]))
    assert refused.exit_code == 1 and "writable by others" in str(refused.hosts[0].error)
    assert target.exists() is not create and (create or target.read_bytes() == b"old\n")
    step["copy"]["unsafe_dir"] = True
    allowed = rig.apply(rig.playbook("shared", [step]))
    assert allowed.exit_code == 0, allowed.hosts[0].error
    assert target.read_bytes() == b"new\n"


def test_a_hard_linked_file_is_refused_unless_allowed(rig: LocalRig) -> None:
    env = rig.files / "server.env"
    os.link(env, rig.files / "other-name")
    step: dict[str, Any] = {"copy": {"content": "new\n", "dest": "{{ etc }}/server.env"}}
    refused = rig.apply(rig.playbook("linked", [step]))
    assert refused.exit_code == 1 and "hard links" in str(refused.hosts[0].error)
    assert env.read_bytes() == ENV
    step["copy"]["hardlinks"] = "allow"
    assert rig.apply(rig.playbook("linked", [step])).exit_code == 0
    assert env.read_bytes() == b"new\n" and (rig.files / "other-name").read_bytes() == ENV


def test_owner_and_group_by_name_and_number(rig: LocalRig) -> None:
    import grp
    import pwd

    env = rig.files / "server.env"
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    step = {"copy": {"content": ENV.decode(), "dest": "{{ etc }}/server.env", "owner": user,
                     "group": str(os.getgid())}}  # fmt: skip
    run = rig.apply(rig.playbook("owner", [step]))
    assert run.exit_code == 0 and run.hosts[0].outcome == "unchanged", run.hosts[0].error
    assert env.stat().st_uid == os.getuid()
    step["copy"]["owner"] = "no-such-user-x"
    missing = rig.apply(rig.playbook("owner", [step]))
    assert missing.exit_code == 1 and "no user 'no-such-user-x'" in str(missing.hosts[0].error)
    assert group  # the name exists: numbers and names are both accepted


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_a_new_owner_is_set_and_undone(rig: LocalRig) -> None:
    import pwd

    env = rig.files / "server.env"
    nobody = pwd.getpwnam("nobody")
    step = {"copy": {"content": ENV.decode(), "dest": "{{ etc }}/server.env", "owner": "nobody"}}
    run = rig.apply(rig.playbook("chown", [step]))
    assert run.exit_code == 0, run.hosts[0].error
    assert run.hosts[0].steps[0].summary == f"changes owner 0 -> {nobody.pw_uid}"
    assert env.stat().st_uid == nobody.pw_uid and mode_of(env) == 0o640
    assert rig.apply(rig.playbook("chown", [step])).hosts[0].outcome == "unchanged"
    (run_id,) = rig.runs()
    assert rig.rollback(run_id).exit_code == 0
    assert env.stat().st_uid == 0 and mode_of(env) == 0o640 and env.read_bytes() == ENV
