"""The file half of `RemoteHost`: stat, fetch, read, write atomically, append, list, remove.

A mixin, so that callers keep one door (``remote.write_atomic(...)``) while commands and
files live in two modules. `RemoteHost` provides the connection it needs: the SFTP client,
the lock's shell (`deploy.remote.session`) and the liveness check that tells a full disk from
a lost connection (`_translate`).

Cost model (docs/performance.md): files are read through the lock's shell (or come with the
lock's own exec: ``prefetch``), so a run that only reads opens no SFTP; writes, renames and
the journal go over SFTP, which is served without a shell where sshd runs ``internal-sftp``.
"""

from __future__ import annotations

import contextlib
import secrets
import stat as statmod
from abc import ABC, abstractmethod

import paramiko

from deploy.errors import HostUnreachable, PermissionDenied, StepFailed
from deploy.remote.become import Become
from deploy.remote.session import Session
from deploy.remote.sftpfile import FileStat, file_stat, fsync, raise_write_error, temp_prefix
from deploy.remote.shellfile import fetch_command, parse_fetch


class HostFiles(ABC):
    """File operations on one host; mixed into `RemoteHost`, which provides the connection."""

    name: str
    #: Round trips by kind (see `RemoteHost`).
    ops: dict[str, int]
    session: Session | None
    #: Set under become (`deploy.remote.become`); names who a refusal concerns.
    become: Become | None
    #: Status and bytes of files the lock's exec already read (``acquire(prefetch=)``),
    #: each answered once by `fetch`; a write or removal of the path drops it.
    prefetched: dict[str, tuple[FileStat, bytes | None]]

    @property
    @abstractmethod
    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP client, opened on first use."""

    @property
    @abstractmethod
    def acting_user(self) -> str:
        """Whom the host's operations run as (for permission messages)."""

    @abstractmethod
    def _connected(self) -> bool:
        """Whether the SSH transport is still up."""

    @abstractmethod
    def _lost(self, exc: BaseException, doing: str) -> HostUnreachable:
        """The error for a connection lost while ``doing``."""

    @abstractmethod
    def _run_in_session(
        self, command: str, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes, bool]:
        """Run ``command`` in the lock's shell: (status, stdout, stderr, timed out)."""

    def _translate(self, exc: BaseException, doing: str, path: str) -> Exception:
        """Map an SFTP failure to a filesystem error (StepFailed) or a lost connection.

        SFTP reports disk-full, read-only filesystems and the like as a bare "Failure" without
        errno, so the connection's liveness, not the exception type, tells the two apart.
        """
        alive = self._connected()
        if isinstance(exc, PermissionError):
            return PermissionDenied(self.name, path, self.acting_user, self.become is not None)
        if isinstance(exc, OSError) and alive:
            reason = exc.strerror or str(exc) or type(exc).__name__
            if reason == "Failure":  # SFTP's catch-all status, in practice ENOSPC or EROFS
                reason = "Failure (the filesystem may be full or read-only)"
            return StepFailed(f"{self.name}: failed {doing} {path}: {reason}")
        return self._lost(exc, f"{doing} {path}")

    def stat(self, path: str) -> FileStat | None:
        """lstat ``path``; None when it does not exist."""
        self.ops["sftp"] += 1
        try:
            attrs = self.sftp.lstat(path)
        except FileNotFoundError:
            return None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._translate(exc, "reading the status of", path) from exc
        return file_stat(path, attrs)

    def fetch(self, path: str) -> tuple[FileStat | None, bytes | None]:
        """lstat ``path`` and, if it is a regular file, read it (see `shellfile.parse_fetch`).

        While the lock is held this is one command in the lock's shell, so a run that only
        reads never opens SFTP (`deploy.remote.shellfile` says why that matters); otherwise,
        or where the host's shell cannot answer, an SFTP lstat and read. A file the lock's
        exec prefetched is answered from that, once, without a round trip.
        """
        early = self.prefetched.pop(path, None)
        if early is not None:
            return early
        if self.session is not None:
            # No timeout, as an SFTP read has none: timeout(1) would cost two process starts.
            status, out, err, _ = self._run_in_session(fetch_command(path), None, None)
            try:
                answer = parse_fetch(self.name, path, status, out, err)
            except PermissionDenied as exc:
                raise exc.by(self.acting_user, self.become is not None) from None
            if answer is not None:
                return answer
        info = self.stat(path)
        if info is None or not info.is_file:
            return info, None
        try:
            return info, self.read(path)
        except FileNotFoundError:
            return info, None

    def read(self, path: str) -> bytes:
        """The whole content of ``path`` (one open, pipelined reads, close).

        Raises:
            FileNotFoundError: it does not exist (callers turn this into their own message).
            StepFailed: permission denied or another filesystem error.
        """
        self.ops["sftp"] += 3
        try:
            with self.sftp.open(path, "rb") as handle:
                handle.prefetch()
                data: bytes = handle.read()
                return data
        except FileNotFoundError:
            raise
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._translate(exc, "reading", path) from exc

    def write_atomic(
        self,
        path: str,
        data: bytes,
        *,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> FileStat | None:
        """Replace ``path`` with ``data`` so that no reader ever sees a partial file.

        Writes a temp file in the same directory, fsyncs it (fsync@openssh.com), checks that
        every byte landed, gives it the mode and owner, then renames it over the target
        (posix-rename@openssh.com). Returns the new file's stat when an owner was given (that
        path stats the temp file anyway), else None. On any failure (a full disk included)
        the temp file is removed and the target is untouched.
        """
        self.prefetched.pop(path, None)
        directory, _, base = path.rpartition("/")
        tmp = f"{directory}/{temp_prefix(base)}{secrets.token_hex(4)}.tmp"
        sftp = self.sftp
        self.ops["sftp"] += 5
        try:
            with sftp.open(tmp, "wx") as handle:  # O_CREAT|O_EXCL|O_WRONLY
                handle.set_pipelined(True)
                handle.write(data)
                handle.flush()
                raise_write_error(sftp, handle)
                fsync(sftp, handle)
            if mode is not None:
                sftp.chmod(tmp, statmod.S_IMODE(mode))
                self.ops["sftp"] += 1
            done: FileStat | None = None
            if uid is not None and gid is not None:
                # One stat serves three ends: the owner check, a size check behind
                # `raise_write_error`, and the caller's new stat of the target (rename keeps it).
                current = sftp.stat(tmp)
                self.ops["sftp"] += 1
                if current.st_size != len(data):
                    raise OSError(f"wrote {current.st_size} of {len(data)} bytes (disk full?)")
                if (current.st_uid, current.st_gid) != (uid, gid):
                    sftp.chown(tmp, uid, gid)
                    self.ops["sftp"] += 1
                done = file_stat(path, current)
            sftp.posix_rename(tmp, path)
            return done
        except BaseException as exc:
            with contextlib.suppress(Exception):
                sftp.remove(tmp)
            if isinstance(exc, paramiko.SSHException | EOFError | OSError):
                raise self._translate(exc, "writing", path) from exc
            raise

    def remove_temp_leftovers(self, path: str) -> list[str]:
        """Remove temp files that an interrupted `write_atomic` of ``path`` left beside it.

        A cut connection or a killed workstation stops a write before its cleanup runs, which
        leaves ``.NAME.deploy-XXXXXXXX.tmp`` (a partial copy) in the target's directory —
        where a loader that globs the directory may pick it up. Undo calls this: the host's
        lock is held, so no other run of ours can be writing there. Returns the names removed.
        """
        directory, _, base = path.rpartition("/")
        prefix = temp_prefix(base)
        removed = []
        try:
            names = self.listdir(directory or "/")
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._translate(exc, "listing", directory) from exc
        for name in names:
            if name.startswith(prefix) and name.endswith(".tmp"):
                try:
                    self.remove(f"{directory}/{name}")
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    raise self._translate(exc, "removing", f"{directory}/{name}") from exc
                removed.append(name)
        return removed

    def remove(self, path: str) -> None:
        self.prefetched.pop(path, None)
        self.ops["sftp"] += 1
        with contextlib.suppress(FileNotFoundError):
            self.sftp.remove(path)

    def open_append(self, path: str) -> paramiko.SFTPFile:
        """An append handle kept open for a run's journal (one open, then write+fsync per line)."""
        self.ops["sftp"] += 1
        try:
            return self.sftp.open(path, "ab")
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._translate(exc, "opening", path) from exc

    def append(self, handle: paramiko.SFTPFile, data: bytes, *, durable: bool = True) -> None:
        """Write ``data`` to an append handle; with ``durable``, fsync before returning (which
        also makes every earlier write to the handle durable)."""
        self.ops["sftp"] += 2 if durable else 1
        try:
            handle.write(data)
            handle.flush()
            if durable:
                fsync(self.sftp, handle)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._translate(exc, "appending to", "the journal") from exc

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        """Create one directory level (its parent must exist); an existing one is fine."""
        self.ops["sftp"] += 1
        try:
            self.sftp.mkdir(path, mode)
        except OSError as exc:
            existing = self.stat(path)
            if existing is None or not statmod.S_ISDIR(existing.mode):
                raise StepFailed(
                    f"{self.name}: cannot create {path}: {exc.strerror or exc}"
                ) from exc

    def listdir(self, path: str) -> list[str]:
        self.ops["sftp"] += 1
        try:
            return sorted(self.sftp.listdir(path))
        except FileNotFoundError:
            return []
