"""Whom a restarted server runs as: /proc/PID/status read, the switch decided, the record kept.

The end-to-end proof (a real user, real sshd, the kernel's word on the new server) is
tests/integration/test_service_runas.py; these are the pure parts around it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.config.services import ServiceSpec
from deploy.hostpy.agent_proc import parse_status, start_ids
from deploy.services.control import ServiceControl
from deploy.services.desired import desired
from deploy.services.state import ServiceState, describe_user
from deploy.steps.service import RestartArgs
from deploy.steps.service_client import run_as_note

#: A real /proc/PID/status (Linux 6.x), abridged; real ids differ from the effective ones, as
#: in a process that ran a set-uid helper.
STATUS = """\
Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
Tgid:\t4242
Pid:\t4242
PPid:\t1
Uid:\t1234\t0\t0\t0
Gid:\t1235\t1235\t1235\t1235
FDSize:\t64
Groups:\t44 1235 2000 \n
NStgid:\t4242
"""

ML = {"uid": 1234, "gid": 1235, "groups": [44, 1235, 2000], "name": "ml"}


def test_status_gives_the_real_ids_and_every_group() -> None:
    assert parse_status(STATUS) == {"uid": 1234, "gid": 1235, "groups": [44, 1235, 2000]}


def test_status_with_no_supplementary_groups() -> None:
    text = STATUS.replace("Groups:\t44 1235 2000 \n", "Groups:\t\n")
    assert parse_status(text) == {"uid": 1234, "gid": 1235, "groups": []}


@pytest.mark.parametrize(
    "broken",
    ["", "Name:\tx\n", STATUS.replace("Uid:\t1234", "Uid:\tabc"), STATUS.replace("Gid:", "G:")],
)
def test_a_status_without_usable_ids_is_none(broken: str) -> None:
    assert parse_status(broken) is None


def test_this_process_status() -> None:
    ids = parse_status(Path("/proc/self/status").read_text())
    assert ids == {"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups())}


def test_root_switches_to_exactly_the_users_ids() -> None:
    assert start_ids(ML, (0, 0, 0)) == ((1234, 1235, [44, 1235, 2000]), None)


def test_a_root_server_still_starts_as_root_with_its_groups() -> None:
    root = {"uid": 0, "gid": 0, "groups": [0], "name": "root"}
    assert start_ids(root, (0, 0, 0)) == ((0, 0, [0]), None)


def test_no_user_known_starts_as_the_helper_runs() -> None:
    assert start_ids(None, (0, 0, 0)) == (None, None)
    assert start_ids(None, (1000, 1000, 1000)) == (None, None)


def test_a_helper_that_already_is_the_user_needs_no_switch() -> None:
    assert start_ids(ML, (1234, 1234, 1235)) == (None, None)


@pytest.mark.parametrize("me", [(1000, 1000, 1000), (1234, 1234, 1000), (1234, 1000, 1235)])
def test_a_helper_that_cannot_switch_refuses_in_one_line(me: tuple[int, int, int]) -> None:
    ids, refusal = start_ids(ML, me)
    assert ids is None and refusal is not None and "\n" not in refusal
    assert "as ml (uid 1234, gid 1235)" in refusal and "not root" in refusal


def test_a_malformed_user_is_refused() -> None:
    ids, refusal = start_ids({"uid": "x", "gid": 1}, (0, 0, 0))
    assert ids is None and refusal and refusal.startswith("cannot tell whom")


def test_the_state_keeps_the_user_and_an_old_record_means_as_before() -> None:
    state = ServiceState(running=True, pid=7, argv=["python3"], uid=1234, gid=1235, groups=[44])
    state.user = "ml"
    record = json.loads(json.dumps(state.to_record()))  # as the journal stores it
    again = ServiceState.from_record(record)
    assert again.run_as() == {"uid": 1234, "gid": 1235, "groups": [44], "name": "ml"}
    old = {k: v for k, v in record.items() if k not in ("uid", "gid", "groups", "user")}
    assert ServiceState.from_record(old).run_as() is None


def test_the_desired_server_runs_as_the_running_one() -> None:
    state = ServiceState(
        running=True, pid=7, argv=["python3", "-m", "sglang.launch_server"], uid=1234, gid=1235
    )
    want = desired(state, RestartArgs(service="sglang").changes(), ServiceSpec())
    assert want.user == {"uid": 1234, "gid": 1235, "groups": [], "name": None}
    template = desired(
        ServiceState(running=False), RestartArgs(service="s").changes(), ServiceSpec()
    )
    assert template.user is None, "a service names no user: the template starts as before"


def test_user_wording() -> None:
    assert describe_user(ML) == "ml (uid 1234, gid 1235, groups 44,1235,2000)"
    assert describe_user({"uid": 5, "gid": 5, "groups": []}) == "uid 5 (uid 5, gid 5, groups none)"
    assert run_as_note(None) == ""
    assert run_as_note(ML) == " as ml (uid 1234, gid 1235, groups 44,1235,2000)"


class _Recorder:
    """Records the one command the start sends and answers as the helper would."""

    name = "h"

    def __init__(self) -> None:
        self.stdin: dict[str, Any] = {}

    def run(self, command: str, stdin: bytes = b"", timeout: float = 0) -> Any:
        self.stdin = json.loads(stdin)
        answer = json.dumps({"pid": 9, "log_offset": 0, "user": self.stdin.get("user")})
        return type("R", (), {"ok": True, "stdout": answer, "exit_status": 0})()


def test_the_start_sends_the_user_to_the_helper() -> None:
    remote = _Recorder()
    svc = ServiceControl(remote, "/var/lib/deploy", "sglang", ServiceSpec())  # type: ignore[arg-type]
    started = svc.start(argv=["python3"], env={}, user=ML)
    assert remote.stdin["user"] == ML and started["user"] == ML
    svc.start(argv=["python3"], env={})
    assert "user" not in remote.stdin, "no user: the helper starts it as it runs"


def test_the_helper_starts_the_child_as_the_user_writing_to_its_own_log(tmp_path: Path) -> None:
    """The helper's ``start`` itself, as root: the child's /proc/self/status has exactly the
    ids asked for, and it writes to the log deploy opened in a directory only root may enter."""
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    from deploy.hostpy import agent

    log = tmp_path / "services" / "x.log"
    answer = agent.start(  # type: ignore[no-untyped-call]
        {
            "argv": ["/bin/sh", "-c", "cat /proc/self/status"],
            "env": {"PATH": "/usr/bin:/bin"},
            "env_mode": "exact",
            "cwd": "/",
            "log_file": str(log),
            "pid_file": str(tmp_path / "x.pid"),
            "header": "=== test ===",
            "user": {"uid": 4321, "gid": 4322, "groups": [44, 4322], "name": None},
        }
    )
    assert answer.get("pid"), answer
    while Path(f"/proc/{answer['pid']}").exists():  # our own child: reap it
        if os.waitpid(answer["pid"], os.WNOHANG) != (0, 0):
            break
    assert (log.parent.stat().st_mode & 0o777) == 0o700
    status = parse_status(log.read_text().partition("=== test ===\n")[2])
    assert status == {"uid": 4321, "gid": 4322, "groups": [44, 4322]}


def test_the_plan_refuses_before_any_stop_when_the_helper_cannot_switch() -> None:
    svc = ServiceControl(_Recorder(), "/var/lib/deploy", "sglang", ServiceSpec())  # type: ignore[arg-type]
    assert svc.start_refusal(ML) is None, "no probe yet: nothing known, the start decides"
    svc.helper_ids = [1000, 1000, 1000]
    refusal = svc.start_refusal(ML)
    assert refusal and "cannot start the server as ml" in refusal
    assert svc.start_refusal(None) is None
    svc.helper_ids = [0, 0, 0]
    assert svc.start_refusal(ML) is None


def test_a_helper_that_is_not_root_refuses_another_user_and_starts_nothing(
    tmp_path: Path,
) -> None:
    """The helper's program, run as a real unprivileged user (useradd, setpriv), asked to
    start a server as root: one line, no process, no log, no pid file."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("makes a user and switches to it: run as root, with setpriv")
    from deploy.hostpy import program
    from tests.faults.attacker import ATTACKER_PYTHON, _ensure_user

    user = _ensure_user()
    marker = Path(tempfile.mkdtemp(prefix="deploy-runas-", dir="/tmp"))
    try:
        marker.chmod(0o777)
        args = {
            "argv": ["/bin/sh", "-c", f"touch {marker}/ran"],
            "env": {},
            "env_mode": "exact",
            "cwd": "/",
            "log_file": f"{marker}/services/x.log",
            "pid_file": f"{marker}/x.pid",
            "header": "",
            "user": {"uid": 0, "gid": 0, "groups": [0], "name": "root"},
        }
        done = subprocess.run(
            [*user.argv(ATTACKER_PYTHON, "-I", "-S", "-c", program("agent"), "start")],
            input=json.dumps(args).encode(),
            capture_output=True,
            timeout=60,
            cwd="/",
        )
        answer = json.loads(done.stdout)
        assert set(answer) == {"error"}, answer
        assert answer["error"].startswith("cannot start the server as root (uid 0, gid 0)")
        assert f"runs as uid {user.uid}, not root" in answer["error"]
        assert "\n" not in answer["error"]
        time.sleep(0.2)
        assert sorted(p.name for p in marker.iterdir()) == [], "nothing started or created"
    finally:
        shutil.rmtree(marker, ignore_errors=True)
