"""`FileStat`: what a host says of a path, whichever way it was read (the helper or SFTP).

Its own module, with no SSH import, so that the steps can name it cheaply.
"""

from __future__ import annotations

import stat as statmod
from dataclasses import dataclass, field


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
