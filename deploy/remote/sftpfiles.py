"""The SFTP fallback of a host's file operations: files read or written without the lock.

While the lock is held every file operation goes through the host's helper
(`deploy.remote.hostfiles`, fd-based). Tools that only look (``--check``, ``deploy status``)
take no lock, so they read over SFTP; this module is that path, kept apart so that the helper
path reads as one concept. SFTP reports little: ``Failure`` is its catch-all status (in
practice ENOSPC or EROFS), and a pipelined write's failure is lost unless collected
(`deploy.remote.sftpfile.raise_write_error`).
"""

from __future__ import annotations

import contextlib
import secrets
import stat as statmod
from typing import Any, Protocol

import paramiko

from deploy.errors import HostUnreachable, PermissionDenied, StepFailed
from deploy.remote.become import Become
from deploy.remote.sftpfile import FileStat, file_stat, fsync, raise_write_error, temp_prefix

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
        return file_stat(path, attrs)

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

    def write_atomic(
        self,
        path: str,
        data: bytes,
        *,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """Temp file (``O_EXCL``), fsync, owner then mode, rename."""
        directory, _, base = path.rpartition("/")
        tmp = f"{directory}/{temp_prefix(base)}{secrets.token_hex(4)}.tmp"
        sftp = self.link.sftp
        ops = self.link.ops
        ops["sftp"] += 5
        try:
            with sftp.open(tmp, "wx") as handle:  # O_CREAT|O_EXCL|O_WRONLY
                handle.set_pipelined(True)
                handle.write(data)
                handle.flush()
                raise_write_error(sftp, handle)
                fsync(sftp, handle)
            current = sftp.stat(tmp)
            ops["sftp"] += 1
            if current.st_size != len(data):
                raise OSError(f"wrote {current.st_size} of {len(data)} bytes (disk full?)")
            if (
                uid is not None
                and gid is not None
                and (current.st_uid, current.st_gid) != (uid, gid)
            ):
                sftp.chown(tmp, uid, gid)
                ops["sftp"] += 1
            if mode is not None:
                sftp.chmod(tmp, statmod.S_IMODE(mode))
                ops["sftp"] += 1
            sftp.posix_rename(tmp, path)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                sftp.remove(tmp)
            if isinstance(exc, SFTP_ERRORS):
                raise self.translate(exc, "writing", path) from exc
            raise

    def remove_temp_leftovers(self, path: str) -> list[str]:
        """Remove ``.NAME.deploy-XXXXXXXX.tmp`` files beside ``path``; return their names."""
        directory, _, base = path.rpartition("/")
        prefix = temp_prefix(base)
        removed = []
        try:
            names = self.listdir(directory or "/")
        except SFTP_ERRORS as exc:
            raise self.translate(exc, "listing", directory) from exc
        for name in names:
            if name.startswith(prefix) and name.endswith(".tmp"):
                try:
                    self.remove(f"{directory}/{name}")
                except SFTP_ERRORS as exc:
                    raise self.translate(exc, "removing", f"{directory}/{name}") from exc
                removed.append(name)
        return removed

    def remove(self, path: str) -> None:
        """Unlink ``path``; a missing one is fine."""
        self.link.ops["sftp"] += 1
        with contextlib.suppress(FileNotFoundError):
            self.link.sftp.remove(path)

    def append_file(self, path: str, data: bytes, *, durable: bool) -> None:
        """Open for append, write (fsync when ``durable``), close."""
        ops = self.link.ops
        ops["sftp"] += 1
        try:
            handle = self.link.sftp.open(path, "ab")
        except SFTP_ERRORS as exc:
            raise self.translate(exc, "opening", path) from exc
        try:
            ops["sftp"] += 2 if durable else 1
            handle.write(data)
            handle.flush()
            if durable:
                fsync(self.link.sftp, handle)
        except SFTP_ERRORS as exc:
            raise self.translate(exc, "appending to", "the journal") from exc
        finally:
            with contextlib.suppress(Exception):
                handle.close()

    def mkdir(self, path: str, mode: int) -> None:
        """Create one directory level; an existing directory is fine."""
        self.link.ops["sftp"] += 1
        try:
            self.link.sftp.mkdir(path, mode)
        except OSError as exc:
            existing = self.stat(path)
            if existing is None or not statmod.S_ISDIR(existing.mode):
                raise StepFailed(
                    f"{self.link.name}: cannot create {path}: {exc.strerror or exc}"
                ) from exc

    def listdir(self, path: str) -> list[str]:
        """Sorted names in ``path``; a missing directory is empty."""
        self.link.ops["sftp"] += 1
        try:
            return sorted(self.link.sftp.listdir(path))
        except FileNotFoundError:
            return []
