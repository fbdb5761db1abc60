"""The file half of `RemoteHost`: stat, fetch, read, write atomically, append, list, remove.

A mixin, so that callers keep one door (``remote.write_atomic(...)``) while commands and
files live in two modules. `RemoteHost` provides the connection it needs: the SFTP client,
the lock's shell (`deploy.remote.session`) and the liveness check that tells a full disk from
a lost connection (`_translate`).

While the lock is held (every run), files are read and written by the host-side helper
(`deploy.remote.fileagent`, started once per run in the lock's shell) through file
descriptors: no check by path followed by a change by path, which another user who can write
in the directory could redirect with a symlink (issue 14). Writes, saved copies and journal
records are sent without waiting (the helper serves them in order, so an intent is fsynced
before the change it announces); the run waits for their answers once, at `flush` — at commit,
or with the next command (`deploy.remote.session`). Without the lock (tools that only look),
the same calls fall back to SFTP.
"""

from __future__ import annotations

import contextlib
import errno
import json
import secrets
import shlex
import stat as statmod
from abc import ABC, abstractmethod
from typing import Any

import paramiko

from deploy.errors import HostUnreachable, PermissionDenied, StepFailed
from deploy.remote.become import Become
from deploy.remote.hostprogram import program
from deploy.remote.session import Call, CallFailed, NoHelper, Session, SessionLost
from deploy.remote.sftpfile import FileStat, file_stat, fsync, raise_write_error, temp_prefix

#: The helper's program text, started by the lock's shell (`deploy.remote.lock`).
HELPER_SOURCE = program("fileagent")  # one program: fileagent.py with its parts inlined


def fetch_answer(path: str, call: Call) -> tuple[FileStat | None, bytes | None]:
    """(lstat, content) from a helper ``read`` answer: None status when missing, None content
    unless a regular file (a symlink is described, never followed)."""
    answer = call.answer or {}
    if answer.get("missing"):
        return None, None
    raw = answer["stat"]
    info = FileStat(
        path=path,
        mode=int(raw["mode"]),
        uid=int(raw["uid"]),
        gid=int(raw["gid"]),
        size=int(raw["size"]),
        mtime=float(raw["mtime"]),
        nlink=int(raw.get("nlink", 1)),
        xattrs=dict(answer.get("xattrs") or {}),
    )
    return info, call.payload if answer.get("content") else None


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
    prefetched: dict[str, tuple[FileStat | None, bytes | None]]
    #: Commands the lock's round trip ran ahead (``acquire(speculate=)``): (exit status,
    #: stdout, stderr), for a step to use when what it checks is what they saw.
    speculated: dict[str, tuple[int, bytes, str]]

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

    @abstractmethod
    def _run_on_exec(
        self, command: str, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes, bool]:
        """Run ``command`` on a new exec channel: (status, stdout, stderr, timed out)."""

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

    def _helper(self, doing: str, path: str, exc: Exception) -> Exception:
        """The error for a helper request that failed (or the session that was lost)."""
        if isinstance(exc, SessionLost):
            return self._lost(exc, f"{doing} {path}")
        if isinstance(exc, NoHelper):
            return StepFailed(f"{self.name}: {exc}")
        assert isinstance(exc, CallFailed)
        answer = exc.call.answer or {}
        where = str(exc.call.args.get("path", path))
        if answer.get("refused"):
            return StepFailed(f"{self.name}: {answer.get('error')}")
        if answer.get("errno") == "EACCES":
            return PermissionDenied(self.name, where, self.acting_user, self.become is not None)
        verb = {"write": "writing", "append": "appending to", "mkdir": "creating"}.get(
            str(exc.call.args.get("op")), doing
        )
        return StepFailed(f"{self.name}: failed {verb} {where}: {answer.get('error')}")

    def _call(self, args: dict[str, Any], payload: bytes = b"", *, wait: bool, doing: str) -> Call:
        """Send one request to the helper; with ``wait``, collect it (and all before it)."""
        assert self.session is not None
        path = str(args.get("path", ""))
        try:
            call = self.session.call(args, payload)
            if wait:
                self.session.wait()
        except (CallFailed, NoHelper, SessionLost) as exc:
            raise self._helper(doing, path, exc) from exc
        return call

    def flush(self) -> None:
        """Wait once for every request sent without waiting; raise the first failure.

        Raises:
            StepFailed: a write, saved copy or record failed (those after it were skipped).
            HostUnreachable: the connection was lost.
        """
        if self.session is None or not self.session.pending:
            return
        try:
            self.session.wait()
        except (CallFailed, NoHelper, SessionLost) as exc:
            raise self._helper("writing", "", exc) from exc

    def read_ahead(self, paths: list[str]) -> None:
        """Without the lock (``--check``): read ``paths`` through the helper in one exec, so the
        plan's reads are fd-based too (``O_NOFOLLOW``, status and bytes from one fd), and kept
        for `fetch`. A host without python3 leaves them to `fetch`'s SFTP path.
        """
        if self.session is not None or not paths:
            return
        frames = []
        for path in paths:
            head = json.dumps({"op": "read", "path": path}).encode()
            frames.append(b"%d 0\n" % len(head) + head)
        command = (
            "p=$(command -v /usr/bin/python3 || command -v /usr/local/bin/python3 || "
            f'command -v python3) && exec "$p" -I -S -c {shlex.quote(HELPER_SOURCE)} once'
        )
        status, out, _, _ = self._run_on_exec(command, b"".join(frames), 60)
        if status != 0:
            return
        for path in paths:
            header, _, out = out.partition(b"\n")
            parts = header.split()
            if len(parts) != 3 or parts[0] != b"ANS":
                return
            size, length = int(parts[1]), int(parts[2])
            call = Call(
                {"op": "read", "path": path}, json.loads(out[:size]), out[size : size + length]
            )
            out = out[size + length :]
            if call.ok:
                self.prefetched[path] = fetch_answer(path, call)

    def fetch(self, path: str) -> tuple[FileStat | None, bytes | None]:
        """lstat ``path`` and, if it is a regular file, read it — never through a symlink.

        While the lock is held this is one request to the host's helper, which opens the file
        ``O_NOFOLLOW`` and takes the status and the bytes from that one fd; otherwise an SFTP
        lstat and read. A file the lock's exec prefetched is answered from that, once,
        without a round trip.
        """
        if path in self.prefetched:
            return self.prefetched.pop(path)
        if self.session is not None:
            call = self._call({"op": "read", "path": path}, wait=True, doing="reading")
            return fetch_answer(path, call)
        info = self.stat(path)
        if info is None or not info.is_file:
            return info, None
        try:
            return info, self._sftp_read(path)
        except FileNotFoundError:
            return info, None

    def read(self, path: str) -> bytes:
        """The whole content of ``path``: through the helper (``O_NOFOLLOW``), else SFTP.

        Raises:
            FileNotFoundError: it does not exist (callers turn this into their own message).
            StepFailed: permission denied, not a regular file (a symlink is not followed), or
                another filesystem error.
        """
        if self.session is None:
            return self._sftp_read(path)
        self.prefetched.pop(path, None)
        info, content = self.fetch(path)
        if info is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if content is None:
            kind = "a symlink" if info.is_symlink else "not a regular file"
            raise StepFailed(f"{self.name}: {path} is {kind}; not read")
        return content

    def _sftp_read(self, path: str) -> bytes:
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
        xattrs: dict[str, str] | None = None,
        expect_sha256: str | None = None,
        unsafe_dir: bool = False,
        hardlinks: str = "refuse",
        wait: bool = False,
    ) -> Call | None:
        """Replace ``path`` with ``data`` so that no reader ever sees a partial file.

        Through the helper (`deploy.remote.fileagent.write`): an ``O_EXCL`` temp file in the
        target's directory, then owner, mode and xattrs — those given (undo: what the journal
        recorded), else the current target's (kept, setuid and capabilities included) — then
        fsync, rename and the directory's fsync. ``expect_sha256``: refuse when the target no
        longer holds what was read (a lost update otherwise). A directory others can write in
        and a hard-linked target are refused unless ``unsafe_dir`` / ``hardlinks="allow"``.

        Sent without waiting unless ``wait``: a failure surfaces at the next `flush` (or
        command), and nothing sent after it happens on the host. Returns the request (None
        over SFTP): a failed answer means the target was not touched.
        """
        self.prefetched.pop(path, None)
        if self.session is None:
            self._sftp_write_atomic(path, data, mode=mode, uid=uid, gid=gid)
            return None
        args: dict[str, Any] = {"op": "write", "path": path}
        if mode is not None:
            meta: dict[str, Any] = {"mode": statmod.S_IMODE(mode), "uid": uid, "gid": gid}
            if xattrs is not None:
                meta["xattrs"] = xattrs
            args["meta"] = meta
        if expect_sha256:
            args["expect_sha256"] = expect_sha256
        if unsafe_dir:
            args["unsafe_dir"] = True
        if hardlinks != "refuse":
            args["hardlinks"] = hardlinks
        return self._call(args, data, wait=wait, doing="writing")

    def _sftp_write_atomic(
        self,
        path: str,
        data: bytes,
        *,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """The same over SFTP, without the lock (temp file, fsync, owner then mode, rename)."""
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
            current = sftp.stat(tmp)
            self.ops["sftp"] += 1
            if current.st_size != len(data):
                raise OSError(f"wrote {current.st_size} of {len(data)} bytes (disk full?)")
            if (
                uid is not None
                and gid is not None
                and (current.st_uid, current.st_gid) != (uid, gid)
            ):
                sftp.chown(tmp, uid, gid)
                self.ops["sftp"] += 1
            if mode is not None:
                sftp.chmod(tmp, statmod.S_IMODE(mode))
                self.ops["sftp"] += 1
            sftp.posix_rename(tmp, path)
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
        if self.session is not None:
            call = self._call({"op": "remove_temps", "path": path}, wait=True, doing="cleaning")
            return [str(name) for name in (call.answer or {}).get("removed", [])]
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
        """Unlink ``path`` (a missing one is fine); waits for the answer."""
        self.prefetched.pop(path, None)
        if self.session is not None:
            self._call({"op": "remove", "path": path}, wait=True, doing="removing")
            return
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

    def append_file(self, path: str, data: bytes, *, durable: bool) -> Call | None:
        """Append ``data`` to ``path`` (created 0600; a journal), fsynced when ``durable``.

        Sent without waiting: the helper appends (and fsyncs) before it serves the request
        that follows, so a durable intent precedes its change on the host's disk whatever the
        client does next. Without the lock: SFTP open, write (fsync), close. Returns the
        request, whose answer says later whether the host appended it (`Journal.settle`).
        """
        if self.session is not None:
            args = {"op": "append", "path": path, "durable": durable}
            return self._call(args, data, wait=False, doing="appending to")
        handle = self.open_append(path)
        try:
            self.append(handle, data, durable=durable)
        finally:
            with contextlib.suppress(Exception):
                handle.close()
        return None

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        """Create one directory level (its parent must exist); an existing one is fine.

        Sent without waiting while the lock is held (a failure surfaces at `flush`).
        """
        if self.session is not None:
            self._call({"op": "mkdir", "path": path, "mode": mode}, wait=False, doing="creating")
            return
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
