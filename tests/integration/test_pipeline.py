"""Requests to the host's file helper are pipelined, and a failure stops what was sent after it.

Over real sshd, through the lock's session (`deploy.remote.session`): writes and records are
sent without waiting and answered in order; a refused write makes the host skip every later
request and command — its ``done`` record, a restart the client sent before it knew — until the
client has seen the failure; then the session serves again (the rollback needs it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy.errors import StepFailed
from deploy.remote.lock import acquire
from deploy.sandbox.sshd import SshHost
from tests.integration.conftest import open_remote

HOLDER = {"run_id": "test-run", "user": "tester"}


def test_a_failed_write_skips_everything_sent_after_it(ssh_host: SshHost, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    target = tmp_path / "conf"
    target.write_bytes(b"old\n")
    os.link(target, tmp_path / "second-name")
    journal = tmp_path / "journal"
    marker = tmp_path / "restarted"
    remote = open_remote(ssh_host)
    lock = acquire(remote, str(ssh_host.state_dir), HOLDER, prefetch=[str(target)])
    try:
        waits = remote.ops["wait"]
        remote.append_file(str(journal), b"intent\n", durable=True)
        remote.write_atomic(str(target), b"new\n")  # refused: two hard links
        remote.append_file(str(journal), b"done\n", durable=False)
        assert remote.ops["wait"] == waits, "nothing waited for so far"
        with pytest.raises(StepFailed, match="2 hard links"):
            remote.run(f"touch {marker}")
        assert remote.ops["wait"] == waits + 1, "one wait for the three answers and the command"
        assert not marker.exists(), "the command sent after the failed write did not run"
        assert journal.read_bytes() == b"intent\n", "the done record was skipped"
        assert target.read_bytes() == b"old\n"

        # Seen, so the host serves again: the rollback's records and commands go through.
        remote.append_file(str(journal), b"rollback\n", durable=True)
        assert remote.run(f"touch {marker}").exit_status == 0
        assert marker.exists() and journal.read_bytes() == b"intent\nrollback\n"
        remote.write_atomic(str(target), b"new\n", hardlinks="allow", wait=True)
        assert target.read_bytes() == b"new\n"
    finally:
        lock.release()
        remote.close()


def test_reads_never_follow_a_symlink_swapped_in(ssh_host: SshHost, tmp_path: Path) -> None:
    """The read the issue redirected (``[ -f ] && [ ! -h ] && cat``): now one fd, O_NOFOLLOW."""
    tmp_path.chmod(0o755)
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only\n")
    secret.chmod(0o600)
    target = tmp_path / "conf"
    target.symlink_to(secret)
    remote = open_remote(ssh_host)
    lock = acquire(remote, str(ssh_host.state_dir), HOLDER, prefetch=[str(target)])
    try:
        info, content = remote.fetch(str(target))  # prefetched with the lock
        assert info is not None and info.is_symlink and content is None
        info, content = remote.fetch(str(target))  # asked again, in the session
        assert info is not None and info.is_symlink and content is None
        with pytest.raises(StepFailed, match="symlink"):
            remote.read(str(target))
    finally:
        lock.release()
        remote.close()


def test_without_the_lock_reads_are_fd_based_in_one_exec(ssh_host: SshHost, tmp_path: Path) -> None:
    """``--check`` (and the plan shown before asking) holds no lock: its reads go to the same
    helper, all in one exec, instead of SFTP's lstat-then-open by path."""
    tmp_path.chmod(0o755)
    target = tmp_path / "conf"
    target.write_bytes(b"content\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    remote = open_remote(ssh_host)
    try:
        remote.read_ahead([str(target), str(link), str(tmp_path / "missing")])
        assert remote.session is None
        assert remote.fetch(str(target))[1] == b"content\n"
        info, content = remote.fetch(str(link))
        assert info is not None and info.is_symlink and content is None
        assert remote.fetch(str(tmp_path / "missing")) == (None, None)
        assert (remote.ops["exec"], remote.ops["sftp"]) == (1, 0), remote.ops
    finally:
        remote.close()
