"""`RemoteHost`: the only door to a host — run, read, stat, write atomically, lock.

Lifecycle: ``RemoteHost(settings)`` does nothing; ``open()`` (or entering the ``with`` block)
makes the one SSH connection used for the whole run; SFTP is opened lazily on first use and
shared; ``close()`` releases the lock (if held) and the connection. Every method raises our own
exceptions (`HostUnreachable` when the connection is lost), never paramiko's.

Cost model (see docs/performance.md): an exec starts the user's login shell on the host
(``.bashrc`` included, ~100 ms on some hosts), an SFTP request does not. So files are read,
written and renamed over SFTP, and shell work is batched into as few execs as possible.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import select
import shlex
import stat as statmod
import time
from typing import TYPE_CHECKING

import paramiko

from deploy.errors import CommandResult, HostUnreachable, RemoteCommandFailed, StepFailed
from deploy.remote.connect import ConnectSettings, open_connection
from deploy.remote.session import Session, SessionLost
from deploy.remote.sftpfile import FileStat, file_stat, fsync, raise_write_error, temp_prefix
from deploy.remote.shellfile import fetch_command, parse_fetch

log = logging.getLogger("deploy.remote")

if TYPE_CHECKING:
    from fabric import Connection


class RemoteHost:
    """One host, one SSH connection, for one run. Not thread-safe: one thread per host."""

    def __init__(self, settings: ConnectSettings) -> None:
        self.settings = settings
        self.name = settings.name
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        #: While the lock is held, commands go to its shell instead of new execs (see
        #: `deploy.remote.session`); set and cleared by `deploy.remote.lock`.
        self.session: Session | None = None
        #: Counts of round trips by kind, for the performance budget (docs/performance.md):
        #: ``exec`` starts a login shell, ``cmd`` is a command run in the lock's shell.
        self.ops: dict[str, int] = {"exec": 0, "cmd": 0, "sftp": 0}
        #: Status and bytes of files the lock's exec already read (``acquire(prefetch=)``),
        #: each answered once by `fetch`; a write or removal of the path drops it.
        self.prefetched: dict[str, tuple[FileStat, bytes | None]] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> RemoteHost:
        if self._conn is None:
            self._conn = open_connection(self.settings)
        return self

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
            self._sftp = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> RemoteHost:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transport(self) -> paramiko.Transport:
        if self._conn is None:
            raise RuntimeError("RemoteHost used before open()")
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise HostUnreachable(f"{self.name}: the SSH connection was lost")
        return transport

    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = paramiko.SFTPClient.from_transport(self.transport)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise HostUnreachable(f"{self.name}: cannot open SFTP: {exc}") from exc
            if self._sftp is None:
                raise HostUnreachable(f"{self.name}: the server refused the SFTP subsystem")
        return self._sftp

    def _lost(self, exc: BaseException, doing: str) -> HostUnreachable:
        return HostUnreachable(
            f"{self.name}: connection lost while {doing}: {exc or type(exc).__name__}"
        )

    def _translate(self, exc: BaseException, doing: str, path: str) -> Exception:
        """Map an SFTP failure to a filesystem error (StepFailed) or a lost connection.

        SFTP reports disk-full, read-only filesystems and the like as a bare "Failure" without
        errno, so the connection's liveness, not the exception type, tells the two apart.
        """
        conn = self._conn
        transport = conn.client.get_transport() if conn is not None else None
        alive = transport is not None and transport.is_active()
        if isinstance(exc, PermissionError):
            return StepFailed(f"{self.name}: permission denied {doing} {path}")
        if isinstance(exc, OSError) and alive:
            reason = exc.strerror or str(exc) or type(exc).__name__
            if reason == "Failure":  # SFTP's catch-all status, in practice ENOSPC or EROFS
                reason = "Failure (the filesystem may be full or read-only)"
            return StepFailed(f"{self.name}: failed {doing} {path}: {reason}")
        return self._lost(exc, f"{doing} {path}")

    # -- commands -----------------------------------------------------------------------------

    def start(self, command: str) -> paramiko.Channel:
        """Start ``command`` on a new exec channel and return the channel (caller reads it)."""
        self.ops["exec"] += 1
        log.debug("%s: $ %s", self.name, command if len(command) < 400 else command[:400] + " ...")
        try:
            channel = self.transport.open_session(timeout=self.settings.connect_timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._lost(exc, f"starting {command[:60]!r}") from exc
        return channel

    def run(
        self,
        command: str,
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run a shell command (already quoted by the caller) and collect its output.

        While the lock is held the command runs in the lock's shell (no new login shell);
        otherwise on a new exec channel. Either way it sees the same environment and umask.
        On timeout the result says ``timed_out``: in the lock's shell ``timeout(1)`` stops the
        command on the host; on an exec channel only the channel is closed, so callers that
        need the remote process itself killed wrap the command in ``timeout(1)``.

        Raises:
            RemoteCommandFailed: ``check`` is true and the command failed or timed out.
            HostUnreachable: the connection dropped.
        """
        began = time.monotonic()
        if self.session is not None:
            status, out, err, timed_out = self._run_in_session(command, stdin, timeout)
        else:
            status, out, err, timed_out = self._run_on_exec(command, stdin, timeout)
        result = CommandResult(
            command=command,
            exit_status=-1 if timed_out else status,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration=time.monotonic() - began,
            timed_out=timed_out,
        )
        if check and not result.ok:
            why = f"timed out after {timeout:g} s" if timed_out else f"exited {status}"
            raise RemoteCommandFailed(
                f"{self.name}: `{command[:80]}` {why}: {result.tail(3)}", result
            )
        return result

    def _run_in_session(
        self, command: str, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes, bool]:
        assert self.session is not None
        self.ops["cmd"] += 1
        log.debug("%s: $ %s", self.name, command if len(command) < 400 else command[:400] + " ...")
        try:
            return self.session.run(command, stdin=stdin or b"", timeout=timeout)
        except SessionLost as exc:
            raise self._lost(exc, f"running {command[:60]!r}") from exc

    def _run_on_exec(
        self, command: str, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes, bool]:
        began = time.monotonic()
        channel = self.start(command)
        out: list[bytes] = []
        err: list[bytes] = []
        timed_out = False
        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            deadline = None if timeout is None else began + timeout
            while True:
                while channel.recv_ready():
                    out.append(channel.recv(65536))
                while channel.recv_stderr_ready():
                    err.append(channel.recv_stderr(65536))
                if (
                    channel.exit_status_ready()
                    and not channel.recv_ready()
                    and not channel.recv_stderr_ready()
                ):
                    break
                if channel.closed and not channel.exit_status_ready():
                    raise HostUnreachable(
                        f"{self.name}: the connection closed during {command[:60]!r}"
                    )
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if wait <= 0:
                    timed_out = True
                    break
                select.select([channel], [], [], wait)
            status = -1 if timed_out else channel.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self._lost(exc, f"running {command[:60]!r}") from exc
        finally:
            channel.close()
        return status, b"".join(out), b"".join(err), timed_out

    # -- files --------------------------------------------------------------------------------

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
            answer = parse_fetch(self.name, path, status, out, err)
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


def sha256(data: bytes) -> str:
    """Hex sha256 of content: how files, saved copies and undo checks are identified."""
    return hashlib.sha256(data).hexdigest()


def quote(value: str) -> str:
    """Quote one argument for the remote POSIX shell (every remote argument goes through here)."""
    return shlex.quote(value)
