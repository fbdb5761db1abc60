"""Which listener on the service's port may be adopted as the server (issue 32 point 1).

Pure: `deploy.services.identity.identity_problem` judges the helper's probe answer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from deploy.services.identity import identity_problem

ROOT = {"uid": 0, "gid": 0, "groups": [0], "name": "root"}
ML = {"uid": 1001, "gid": 1001, "groups": [1001], "name": "ml"}
EVE = {"uid": 1234, "gid": 1234, "groups": [1234], "name": "eve"}


def _proc(pid: int, sid: int, user: dict[str, Any], title: str = "python3") -> dict[str, Any]:
    argv = [title, "-m", "sglang.launch_server", "--port", "30000"]
    return {"pid": pid, "pgid": pid, "sid": sid, "cmdline": argv, "user": user}


def _probe(*listeners: dict[str, Any], euid: int = 0, **extra: Any) -> dict[str, Any]:
    return {"listeners": list(listeners), "helper_ids": [euid, euid, euid], **extra}


def test_one_tree_of_the_acting_user_is_adopted() -> None:
    server = _proc(100, 100, ROOT)
    child = {**_proc(101, 100, ROOT, "sglang::scheduler_TP0"), "pgid": 100}
    assert identity_problem(_probe(server, child)) is None


def test_listeners_of_two_trees_or_users_are_refused_naming_each() -> None:
    """The squatter on [::]:PORT beside root's server on 127.0.0.1:PORT."""
    said = identity_problem(_probe(_proc(100, 100, ROOT), _proc(200, 200, EVE)))
    assert said is not None and "more than one process tree or user" in said
    assert "pid 100 (root" in said and "pid 200 (eve" in said
    said = identity_problem(_probe(_proc(100, 100, ROOT), _proc(300, 300, ROOT)))
    assert said is not None and "pid 300" in said  # two trees, one user: refused too


def test_as_root_another_users_server_is_adopted_only_when_named() -> None:
    probe = _probe(_proc(200, 200, ML))
    said = identity_problem(probe)
    assert said is not None and "ml (uid 1001)" in said and "user: ml" in said
    assert identity_problem(probe, named=["ml"]) is None
    assert identity_problem(probe, named=["1001"]) is None
    # A login that is ml itself (no become) may adopt its own server.
    assert identity_problem(_probe(_proc(200, 200, ML), euid=1001)) is None


def test_leftover_children_of_another_user_are_not_reaped_either() -> None:
    orphan = _proc(201, 200, EVE, "sglang::scheduler_TP0")
    said = identity_problem(_probe(orphan))
    assert said is not None and "eve (uid 1234)" in said


def test_our_pid_file_process_counts_as_a_tree() -> None:
    ours = _proc(100, 100, ROOT)
    said = identity_problem(_probe(_proc(200, 200, EVE), pid_file_process=ours), "sglang::")
    assert said is not None and "pid 200" in said
    assert identity_problem(_probe(ours, pid_file_process=ours)) is None


def test_a_root_start_from_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    """Issue 32 point 2: ``python -m`` puts the cwd first on sys.path; a root server whose
    cwd another user owns would import a module they plant there, as root."""
    from deploy.hostpy.agent_trust import start_problem

    tmp_path.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    argv = [sys.executable, "-m", "sglang.launch_server"]
    python = sys.executable
    assert start_problem(python, argv, {}, str(work), 0) is None
    os.chown(work, 1234, 1234)
    said = start_problem(python, argv, {}, str(work), 0)
    assert said is not None and f"{work} is owned by" in said and "(uid 1234)" in said
    assert start_problem(python, argv, {}, str(work), 1234) is None  # as that user: theirs
    os.chown(work, 0, 0)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    said = start_problem(python, argv, {"PYTHONPATH": str(shared)}, str(work), 0)
    assert said is not None and f"{shared} is writable by group or others" in said
    script = shared / "serve.py"
    said = start_problem(python, [python, str(script)], {}, str(work), 0)
    assert said is not None and str(shared) in said  # the script's directory is sys.path[0]


def test_a_program_that_is_not_python_is_judged_by_its_own_path(tmp_path: Path) -> None:
    from deploy.hostpy.agent_trust import start_problem

    assert start_problem(None, ["/bin/sh", "-c", "exec x"], {}, "/", 0) is None
    tmp_path.chmod(0o755)
    tool = tmp_path / "serve"
    tool.write_bytes(b"\x7fELF")
    os.chown(tool, 1234, 1234)
    said = start_problem(None, [str(tool)], {}, "/", 0)
    assert said is not None and f"{tool} is owned by" in said
