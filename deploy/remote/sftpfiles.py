"""The SFTP fallback of a host's file reads: stat, read, list, without the lock.

While the lock is held every read and write goes through the host's file helper
(`deploy.remote.hostfiles`, fd-based). Tools that only look (``deploy status``, ``--check``
where the host has no python3) take no lock, so they read over SFTP. Nothing is written over
SFTP: writes happen only under the lock, through the helper (`FILES_RULE`).
"""

from __future__ import annotations

from typing import Any, Protocol

import paramiko

from deploy.errors import HostUnreachable, PermissionDenied, StepFailed
from deploy.remote.become import Become
from deploy.remote.sftpfile import FileStat

#: What a failed SFTP request raises.
SFTP_ERRORS = (paramiko.SSHException, OSError, EOFError)


class SftpLink(Protocol):
    """What the fallback needs from its host: the SFTP client and the connection's state."""

    name: str
    ops: dict[str, int]
    #: Set under become: a refusal then names the become user.
    become: Become | None

    @property
    def acting_user(self) -> str: ...

    @property
    def sftp(self) -> Any: ...

    def connected(self) -> bool: ...

    def lost(self, exc: BaseException, doing: str) -> HostUnreachable: ...


class SftpFiles:
    """File operations over SFTP for one host (see the module docstring for when)."""

    def __init__(self, link: SftpLink) -> None:
        self.link = link

    def translate(self, exc: BaseException, doing: str, path: str) -> Exception:
        """Map an SFTP failure to a filesystem error (StepFailed) or a lost connection.

        SFTP reports disk-full, read-only filesystems and the like as a bare "Failure" without
        errno, so the connection's liveness, not the exception type, tells the two apart.
        """
        link = self.link
        alive = link.connected()
        if isinstance(exc, PermissionError):
            return PermissionDenied(link.name, path, link.acting_user, link.become is not None)
        if isinstance(exc, OSError) and alive:
            reason = exc.strerror or str(exc) or type(exc).__name__
            if reason == "Failure":  # SFTP's catch-all status, in practice ENOSPC or EROFS
                reason = "Failure (the filesystem may be full or read-only)"
            return StepFailed(f"{link.name}: failed {doing} {path}: {reason}")
        return link.lost(exc, f"{doing} {path}")

    def stat(self, path: str) -> FileStat | None:
        """lstat ``path``; None when it does not exist."""
        self.link.ops["sftp"] += 1
        try:
            attrs = self.link.sftp.lstat(path)
        except FileNotFoundError:
            return None
        except SFTP_ERRORS as exc:
            raise self.translate(exc, "reading the status of", path) from exc
        return FileStat(
            path=path,
            mode=int(attrs.st_mode or 0),
            uid=int(attrs.st_uid or 0),
            gid=int(attrs.st_gid or 0),
            size=int(attrs.st_size or 0),
            mtime=float(attrs.st_mtime or 0),
        )

    def read(self, path: str) -> bytes:
        """The whole file (follows a symlink: the fallback is for tools that only look).

        Raises:
            FileNotFoundError: it does not exist.
        """
        self.link.ops["sftp"] += 3
        try:
            with self.link.sftp.open(path, "rb") as handle:
                handle.prefetch()
                data: bytes = handle.read()
                return data
        except FileNotFoundError:
            raise
        except SFTP_ERRORS as exc:
            raise self.translate(exc, "reading", path) from exc

    def fetch(self, path: str) -> tuple[FileStat | None, bytes | None]:
        """lstat, then the bytes of a regular file (None for anything else)."""
        info = self.stat(path)
        if info is None or not info.is_file:
            return info, None
        try:
            return info, self.read(path)
        except FileNotFoundError:
            return info, None

    def listdir(self, path: str) -> list[str]:
        """Sorted names in ``path``; a missing directory is empty."""
        self.link.ops["sftp"] += 1
        try:
            return sorted(self.link.sftp.listdir(path))
        except FileNotFoundError:
            return []
