"""Commands in the lock's shell behave like execs, and never outlive or leak the lock.

`deploy.remote.session` replaces one login shell per command with one per run. These tests hold
it to what an exec gave: exit status, stdout and stderr kept apart and byte-exact (newlines,
binary, no trailing newline), stdin, the login shell's umask rather than the lock script's
077, timeouts enforced on the host — and to what the lock needs: a process a command leaves
running does not keep the host locked, and the lock is free as soon as the run releases it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.errors import LockHeld
from deploy.remote.host import RemoteHost
from deploy.remote.lock import acquire
from deploy.sandbox.sshd import SshHost
from tests.integration.conftest import open_remote

HOLDER = {"run_id": "test-run", "user": "tester"}


@pytest.fixture
def locked(ssh_host: SshHost) -> Iterator[RemoteHost]:
    remote = open_remote(ssh_host)
    lock = acquire(remote, str(ssh_host.state_dir), HOLDER)
    try:
        yield remote
    finally:
        lock.release()
        remote.close()


def test_commands_run_in_the_locks_shell_exactly_as_execs(locked: RemoteHost) -> None:
    assert locked.session is not None
    execs = locked.ops["exec"]

    result = locked.run("printf 'out\\n\\nx'; printf 'err' >&2; exit 3")
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n\nx", "err")

    echoed = locked.run("cat; printf END", stdin=b"line 1\nline 2 \x00\xff no newline")
    assert echoed.stdout.encode("utf-8", "surrogateescape").startswith(b"line 1\nline 2 \x00")
    assert echoed.stdout.endswith("END") and echoed.exit_status == 0

    # Shell state does not leak from one command to the next (each runs in a subshell).
    locked.run("cd /; X=1; export Y=2")
    home = locked.exec_collect("pwd", None, 30)[1].decode()
    assert locked.run('pwd; echo "[$X][$Y]"').stdout == f"{home}[][]\n"

    assert locked.ops["exec"] == execs + 1, "no new login shell per command (1: the pwd above)"
    assert locked.ops["cmd"] == 4


def test_a_process_left_writing_never_leaks_into_the_next_answer(locked: RemoteHost) -> None:
    first = locked.run("(sleep 0.3; echo LATE; echo LATE >&2) & echo first")
    assert first.stdout == "first\n"
    # LATE is written while this command runs, by a process holding the first one's output.
    second = locked.run("sleep 0.8; echo second")
    assert (second.stdout, second.stderr) == ("second\n", "")


def test_the_login_shells_umask_not_the_lock_scripts(locked: RemoteHost, ssh_host: SshHost) -> None:
    exec_umask = locked.exec_collect("umask", None, 30)[1].decode().strip()
    assert locked.run("umask").stdout.strip() == exec_umask != "0077"


def test_a_timeout_stops_the_command_on_the_host(locked: RemoteHost, tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    began = time.monotonic()
    result = locked.run(f"sleep 5; touch {marker}", timeout=1)
    took = time.monotonic() - began
    assert result.timed_out and result.exit_status == -1
    assert took < 4, f"a 1 s timeout took {took:.1f} s"
    time.sleep(5)
    assert not marker.exists(), "timeout(1) stopped the command on the host"
    assert locked.run("echo still here").stdout == "still here\n", "the session survives"


def test_a_process_left_running_does_not_keep_the_lock(ssh_host: SshHost, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    remote = open_remote(ssh_host)
    lock = acquire(remote, str(ssh_host.state_dir), HOLDER)
    remote.run(f"setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}")
    pid = int(pid_file.read_text())
    second = open_remote(ssh_host)
    try:
        held = {str(p.readlink()) for p in Path(f"/proc/{pid}/fd").iterdir()}
        assert str(ssh_host.state_dir / "lock") not in held, "the child got the lock's fd"
        with pytest.raises(LockHeld, match="test-run"):
            acquire(second, str(ssh_host.state_dir), HOLDER)
        lock.release()
        again = acquire(second, str(ssh_host.state_dir), {"run_id": "next"})
        again.release()
    finally:
        os.kill(pid, signal.SIGKILL)
        remote.close()
        second.close()


def test_fetch_reads_through_the_locks_shell_without_sftp(
    locked: RemoteHost, tmp_path: Path
) -> None:
    weird = tmp_path / "it's a file.py"
    weird.write_bytes(b"# coding: latin-1\nx = '\xe9'\n\x00tail without newline")
    weird.chmod(0o640)
    (tmp_path / "link").symlink_to(weird)
    sftp_before = locked.ops["sftp"]

    info, content = locked.fetch(str(weird))
    assert content == weird.read_bytes()
    assert info is not None and info.permissions == 0o640 and info.size == len(content)
    link, nothing = locked.fetch(str(tmp_path / "link"))
    assert link is not None and link.is_symlink and nothing is None
    folder, nothing = locked.fetch(str(tmp_path))
    assert folder is not None and not folder.is_file and nothing is None
    assert locked.fetch(str(tmp_path / "missing")) == (None, None)
    assert locked.ops["sftp"] == sftp_before, "no SFTP request was needed"
