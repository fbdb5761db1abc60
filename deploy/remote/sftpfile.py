"""SFTP file mechanics under `RemoteHost`: what a file's status says, and the two things
paramiko does not do for us — fsync a remote file, and report a failed pipelined write.

Kept apart from `deploy.remote.host` (the connection, commands and the file operations built
on these) because each is a workaround with its own reason, documented where it lives.
"""

from __future__ import annotations

import stat as statmod
from dataclasses import dataclass, field
from typing import Any

import paramiko


@dataclass(frozen=True)
class FileStat:
    """What `stat` tells about a path (not following a final symlink)."""

    path: str
    mode: int
    uid: int
    gid: int
    size: int
    mtime: float
    nlink: int = 1
    #: Extended attributes (values base64): POSIX ACLs and capabilities are among them.
    #: Known when the host's helper read the file; empty over SFTP.
    xattrs: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_symlink(self) -> bool:
        return statmod.S_ISLNK(self.mode)

    @property
    def is_file(self) -> bool:
        return statmod.S_ISREG(self.mode)

    @property
    def permissions(self) -> int:
        return statmod.S_IMODE(self.mode)


def temp_prefix(base: str) -> str:
    """How `write_atomic` names its temp files for a target called ``base``."""
    return f".{base}.deploy-"


def file_stat(path: str, attrs: Any) -> FileStat:
    return FileStat(
        path=path,
        mode=int(attrs.st_mode or 0),
        uid=int(attrs.st_uid or 0),
        gid=int(attrs.st_gid or 0),
        size=int(attrs.st_size or 0),
        mtime=float(attrs.st_mtime or 0),
    )


def raise_write_error(sftp: paramiko.SFTPClient, handle: paramiko.SFTPFile) -> None:
    """Wait for the status of every pipelined write and raise the first failure.

    With pipelining paramiko sends writes without waiting, and registers no owner for their
    answers: a status that arrives while another request is awaited (our fsync, the close) is
    dropped, so ENOSPC, EIO or a quota error is silently lost. A full disk then leaves a
    truncated temp file that is fsynced and renamed over the target — the original replaced
    by its first pages, reported as success. Collecting the answers here (they are already in
    flight: no extra round trip) is what paramiko itself does for unpipelined writes.
    """
    pending = handle._reqs  # paramiko's queue of unanswered write requests
    while pending:
        sftp._read_response(pending.popleft())  # raises IOError on a failed status


def fsync(sftp: paramiko.SFTPClient, handle: paramiko.SFTPFile) -> None:
    """fsync a remote file through OpenSSH's fsync@openssh.com extension.

    paramiko has no public call for it; the request is the documented extension
    (handle as its only argument), sent on the client's own request channel.
    """
    from paramiko.sftp import CMD_EXTENDED

    sftp._request(CMD_EXTENDED, "fsync@openssh.com", handle.handle)
