"""The restarted server runs as the user the replaced one ran as: uid, gid and groups.

Over real sshd (logged in as root, as on a GPU host), the stand-in SGLang server is started by
hand as a real unprivileged user made with useradd (`tests.faults.attacker`), with a
supplementary group, from a tree that user can read (an arena under /tmp: pytest's own
directories are 0700). Then the playbook's restart, a failed check's automatic rollback and
``deploy rollback`` each start a server; what it runs as is read from the kernel
(``/proc/PID/status``: ``Uid:``, ``Gid:``, ``Groups:``), never from deploy's report. Before
this change every one of them came back as root (uid 0).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_pid
from tests.faults.attacker import ATTACKER_PYTHON, Attacker

#: A supplementary group the old server has beyond its own (``video`` on Debian).
EXTRA_GROUP = 44

RUNAS = """
name: runas
hosts: all
services:
  sglang:
    command: unused
    port: "{{ sglang_port }}"
    user: deploy-attacker  # named: as root, another user's server is adopted only then
steps:
  - restart:
      service: sglang
      args: {set: {--speculative-algorithm: EAGLE3, --speculative-draft-model-path: draft}}
  - wait_healthy: {service: sglang, timeout: 60}
"""


@pytest.fixture
def ml(attacker: Attacker) -> Attacker:
    """The real unprivileged user (`tests.faults.attacker`: skips where it cannot be made)."""
    return attacker


def ids(pid: int) -> tuple[list[int], list[int], list[int]]:
    """Uid (real, effective, saved, fs), Gid (the same) and Groups of ``pid``, from the kernel."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = (
            [int(word) for word in value.split()] if key in ("Uid", "Gid", "Groups") else []
        )
    return fields["Uid"], fields["Gid"], sorted(fields["Groups"])


def as_user(gpu: GpuHost, user: Attacker, arena: Path) -> tuple[GpuHost, Path]:
    """A copy of the host's SGLang tree the user can read, and the user's own home."""
    tree = arena / "sglang"
    shutil.copytree(gpu.python_path, tree / "python")
    for directory, _, _ in os.walk(tree):
        Path(directory).chmod(0o755)
    registry = tree / ".standin-gpu"  # the fake GPUs' registry, which the server writes
    registry.mkdir(mode=0o755)
    os.chown(registry, user.uid, user.gid)
    home = arena / "ml"
    home.mkdir(mode=0o755)
    os.chown(home, user.uid, user.gid)
    package = tree / "python" / "sglang"
    copy = replace(
        gpu,
        python_path=tree / "python",
        model_file=package / "srt" / "models" / "kimi_k25.py",
        standin_config=package / "standin.json",
    )
    return copy, home


def serve_as(gpu: GpuHost, user: Attacker, home: Path, log: Path) -> int:
    """The operator's server, started by hand over SSH as ``user`` with an extra group."""
    argv = [
        "setpriv",
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        f"--groups={user.gid},{EXTRA_GROUP}",
        "--",
        ATTACKER_PYTHON,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "nvidia/Kimi-K2.5-NVFP4",
        "--port",
        str(gpu.port),
        "--host",
        "0.0.0.0",
    ]
    env = f"PYTHONPATH={shlex.quote(str(gpu.python_path))} HOME={shlex.quote(str(home))}"
    gpu_host.run_by_hand(
        gpu,
        f"cd {shlex.quote(str(home))} ; {env} setsid nohup {shlex.join(argv)} "
        f"> {shlex.quote(str(log))} 2>&1 < /dev/null &",
    )
    try:
        gpu_host.wait_healthy(gpu.port)
    except TimeoutError as exc:
        raise AssertionError(log.read_text()) from exc
    pid = listener_pid(gpu.port)
    assert pid is not None
    return pid


def assert_runs_as(pid: int | None, user: Attacker) -> None:
    assert pid is not None
    uid, gid, groups = ids(pid)
    assert uid == [user.uid] * 4, f"pid {pid} runs with Uid {uid}"
    assert gid == [user.gid] * 4, f"pid {pid} runs with Gid {gid}"
    assert groups == sorted({user.gid, EXTRA_GROUP})


def assert_log_is_deploys(pid: int, home: Path) -> None:
    """The server writes its output through the fd deploy opened in its own state directory:
    not a root-owned file in the user's directory, and the server says it is ready there."""
    log = Path(os.readlink(f"/proc/{pid}/fd/1"))
    assert home not in log.parents, log
    assert "The server is fired up and ready to roll!" in log.read_text().rsplit("===", 1)[-1]
    strays = [p for p in home.rglob("*") if p.lstat().st_uid != os.stat(home).st_uid]
    assert strays == [], "nothing of another user's in the user's directory"


def test_restart_and_rollback_start_the_server_as_the_user_it_ran_as(
    make_gpu_hosts: Any, ml: Attacker, arena: Path, tmp_path: Path
) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.10"])
    gpu, home = as_user(gpus[0], ml, arena)
    old_pid = serve_as(gpu, ml, home, arena / "manual.log")
    assert_runs_as(old_pid, ml)
    playbook = tmp_path / "runas.yaml"
    # Issue 32: as root, another user's server is adopted only when the service names them.
    playbook.write_text(RUNAS.replace("    user: deploy-attacker", "    # user not named"))
    unnamed = deploy("apply", str(playbook), "--yes")
    assert unnamed.exit_code == 4, unnamed.output
    assert f"holds the service's port as {ml.name} (uid {ml.uid}), not as root" in unnamed.output
    assert listener_pid(gpu.port) == old_pid
    playbook.write_text(RUNAS)
    groups = ",".join(str(g) for g in sorted({ml.gid, EXTRA_GROUP}))  # as the kernel lists them
    who = f"start as {ml.name} (uid {ml.uid}, gid {ml.gid}, groups {groups})"

    check = deploy("apply", str(playbook), "--check")
    assert check.exit_code == 0, check.output
    assert who in check.stdout, check.stdout
    assert listener_pid(gpu.port) == old_pid

    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 0, result.output
    (host,) = json.loads(result.stdout)["hosts"]
    restart = next(s for s in host["steps"] if s["kind"] == "restart")
    new_pid = listener_pid(gpu.port)
    assert new_pid is not None and new_pid != old_pid
    assert_runs_as(new_pid, ml)
    assert f"as {ml.name} (uid {ml.uid}, gid {ml.gid}, groups {groups})" in restart["summary"]
    assert restart["figures"]["uid"] == ml.uid and restart["figures"]["gid"] == ml.gid
    assert_log_is_deploys(new_pid, home)

    rolled = deploy("rollback", "--yes")
    assert rolled.exit_code == 0, rolled.output
    back = listener_pid(gpu.port)
    assert back is not None and back != new_pid
    assert_runs_as(back, ml)
    assert f"as {ml.name} (uid {ml.uid}, gid {ml.gid}, groups {groups})" in rolled.stdout


def test_a_failed_check_brings_the_old_server_back_as_its_user(
    make_gpu_hosts: Any, ml: Attacker, arena: Path, tmp_path: Path
) -> None:
    gpus, deploy = make_gpu_hosts(["0.5.10"])
    gpu, home = as_user(gpus[0], ml, arena)
    serve_as(gpu, ml, home, arena / "manual.log")
    gpu.configure(bind_host="127.0.0.1")  # the new server no longer listens on 0.0.0.0
    playbook = tmp_path / "runas.yaml"
    playbook.write_text(RUNAS)
    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 1, result.output
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["outcome"] == "rolled back", host
    back = listener_pid(gpu.port)
    assert_runs_as(back, ml)
    assert back is not None
    assert_log_is_deploys(back, home)
