"""The workstation's lock per playbook and inventory: one run of a given job at a time.

A scheduler fires whether or not the previous run has finished. Without this lock the second
run would race the first host by host — some hosts refused (the host lock), others changed
twice — and both reports would be partial. With it the second run stops before contacting
any host and exits 4, or waits for the first with ``--wait-lock SECONDS``.

The lock is ``flock(2)`` on ``$XDG_STATE_HOME/deploy/locks/<playbook>-<digest>.lock``, where
the digest names the playbook and inventory files by absolute path: the same playbook against
another inventory is another job. The kernel releases it when the process ends, however it
ends, so a crashed run never leaves it behind; the holder's description stays in the file
only to name the run in the message of whoever finds it taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from deploy.engine.history import state_home
from deploy.errors import EXIT_NOT_ATTEMPTED, DeployError

_POLL = 0.1


class RunLocked(DeployError):
    """Another run of the same playbook and inventory holds the workstation's lock."""

    exit_code = EXIT_NOT_ATTEMPTED


def lock_path(playbook: Path, inventory: Path) -> Path:
    """Where the lock of this playbook + inventory pair lives (the same for every caller)."""
    key = f"{playbook.resolve()}\0{inventory.resolve()}".encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", playbook.stem)[:40] or "playbook"
    return state_home() / "locks" / f"{stem}-{digest}.lock"


class LocalLock:
    """A held lock; released by `release`, by leaving the ``with`` block, or by exiting."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LocalLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(
    playbook: Path, inventory: Path, holder: dict[str, Any], *, wait: float = 0.0
) -> LocalLock:
    """Take the lock of ``playbook`` + ``inventory``, waiting up to ``wait`` seconds for it.

    ``holder`` (run id, user, pid, since) is written into the file once the lock is ours.

    Raises:
        RunLocked: still held by another run after ``wait`` seconds, naming that run.
    """
    path = lock_path(playbook, inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                other = _read_holder(fd)
                os.close(fd)
                waited = f" after waiting {wait:g} s" if wait > 0 else ""
                hint = "" if wait > 0 else "; pass --wait-lock SECONDS to wait for it"
                raise RunLocked(
                    f"another run of {playbook.name} with {inventory} is in progress{waited}: "
                    f"{_describe(other)}; nothing was done{hint}"
                ) from None
            time.sleep(_POLL)
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)
    return LocalLock(path, fd)


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        value = json.loads(os.pread(fd, 65536, 0) or b"null")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "a run that has not recorded itself yet"
    return (
        f"run {holder.get('run_id', '?')} by {holder.get('user', '?')} "
        f"(pid {holder.get('pid', '?')}) since {holder.get('since', '?')}"
    )
