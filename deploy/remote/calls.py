"""A request to the host's file helper or command loop (`Call`: its arguments, then its answer
and payload, filled in later by `deploy.remote.session.Session`), what can go wrong with one,
and what a host says of a path (`FileStat`). No SSH import: the steps name them cheaply.
"""

from __future__ import annotations

import stat as statmod
from dataclasses import dataclass, field
from typing import Any


class SessionLost(Exception):
    """The loop stopped answering or answered out of frame; the channel cannot be reused."""


class CallFailed(Exception):
    """A helper request failed on the host (refused, or an OS error); the session goes on."""

    def __init__(self, call: Call) -> None:
        super().__init__(call.error)
        self.call = call


class NoHelper(Exception):
    """The host has no python3 to run the file helper (`deploy.hostpy.fileagent`)."""


@dataclass
class Call:
    """One request to the host's file helper, answered later (`Session.wait`)."""

    args: dict[str, Any]
    answer: dict[str, Any] | None = None
    payload: bytes = b""
    #: A shell command sent ahead (`Session.send_run`): the answer holds its exit status and
    #: stderr, the payload its stdout.
    command: bool = False
    #: A command sent as a ``CHECK``, and a command's time limit in seconds on the host: what
    #: they mean for the host and the client is `deploy.remote.session`'s module docstring.
    check: bool = False
    timeout: float | None = None

    @property
    def done(self) -> bool:
        return self.answer is not None

    @property
    def ok(self) -> bool:
        return bool(self.answer and self.answer.get("ok"))

    @property
    def skipped(self) -> bool:
        return bool(self.answer and self.answer.get("skipped"))

    @property
    def failed_check(self) -> bool:
        """A ``CHECK`` that ran and exited other than 0 (the host then skipped what followed)."""
        return bool(self.check and self.answer and self.answer.get("status", 0) != 0)

    @property
    def error(self) -> str:
        answer = self.answer or {}
        text = str(answer.get("error") or "no answer")
        where = answer.get("file")
        if where and where not in text and not answer.get("refused"):
            text += f": {where}"
        return text


@dataclass(frozen=True)
class FileStat:
    """What `stat` tells about a path (not following a final symlink), whichever way it was
    read (the helper or SFTP)."""

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
