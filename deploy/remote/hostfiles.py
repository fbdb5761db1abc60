"""`HostFiles`, the file half of `RemoteHost` (its base class).

While the lock is held (every run), files go through the host's file helper
(`deploy.hostpy.fileagent`; `FILES_RULE`). Writes, saved copies and journal records are sent
without waiting, served in order; the run waits once, at `flush` or the next command. Tools that only look (``deploy status``, ``--check`` where the host has no python3)
take no lock, so they read over SFTP; nothing is ever written over SFTP.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import shlex
import stat as statmod
from typing import TYPE_CHECKING, Any, Unpack

import paramiko

from deploy import ablation
from deploy.errors import HostUnreachable, PermissionDenied, StepFailed
from deploy.hostpy import program
from deploy.remote.api import WriteOptions
from deploy.remote.become import Become
from deploy.remote.calls import Call, CallFailed, FileStat, NoHelper, SessionLost
from deploy.remote.session import Session

#: How files are changed on a host (docs/operations.md shows this text; the helper's
#: operations are `deploy.hostpy.fileagent_ops`).
FILES_RULE = """Every read and write on a host goes through file descriptors, in deploy's file helper:
no check by path followed by a change by path. A path is walked from `/` one component at a
time without following symbolic links (`O_NOFOLLOW`): a symlink on the way is followed only if
root or the login user owns it (`/lib -> usr/lib`), its target walked the same way, so a
directory above the target that another user swaps for a symlink mid-run is never a detour.
For a write, every directory on the way must be owned by root or the login user and not be
writable by group or others — as OpenSSH's StrictModes judges every directory above a key —
a root-owned sticky directory such as `/tmp` passing above the target's own; otherwise the
step is refused unless it says `unsafe_dir: true` (which allows such directories, never
another user's symlink). A hard-linked target is refused unless `hardlinks: allow`.

The new content goes to an exclusive temp file beside the target, which gets the original's
owner, then mode (setuid/setgid kept), then xattrs (capabilities kept), then fsync, an atomic
rename and the directory's fsync. Its POSIX ACL is exactly the original's, none if the
original had none: a temp file created in a directory with a default ACL takes that ACL, and
it is removed before the mode is set, so apply and rollback never open a file to a user the
directory's default names. A file deploy creates (state_dir's records) gets what any new file
in that directory would get, then the mode deploy asks for.

What the host already has does not travel again: the saved copy of a file deploy is about to
edit is made from the file itself (sent whole when a command or a restart may have rewritten
the file since deploy read it), and an edit (or an undo) sends only the stretch between what
the old and the new bytes share at their start and end. The helper puts the new bytes
together only if the file it takes them from still hashes (sha256) to what deploy read, and
writes them only if they hash to what deploy meant; otherwise nothing is written.
"""

#: The helper's program text, started by the lock's shell (`deploy.remote.lock`).
HELPER_SOURCE = program("fileagent")

#: What a failed SFTP request raises.
SFTP_ERRORS = (paramiko.SSHException, OSError, EOFError)


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


def _shared(a: bytes, b: bytes, limit: int) -> int:
    """How many leading bytes ``a`` and ``b`` share, at most ``limit``: whole blocks compared
    in C, then halving to the first difference."""
    n, step = 0, 4096
    while step:
        while n + step <= limit and a[n : n + step] == b[n : n + step]:
            n += step
        step //= 2
    return n


def shared_ends(before: bytes, after: bytes) -> tuple[int, int]:
    """How many bytes ``after`` shares with ``before`` at its head, then at its tail (not
    overlapping the head): an edit in place changes one stretch of a file, and only that
    stretch needs to travel to a host that has ``before`` (`WriteOptions` ``known``)."""
    size = min(len(before), len(after))
    head = _shared(before, after, size)
    return head, _shared(before[::-1], after[::-1], size - head)


class HostFiles:
    """File operations on one host: through the lock's helper, else over SFTP."""

    # `RemoteHost`'s (see `deploy.remote.api.Host`), which these operations use.
    name: str
    ops: dict[str, int]
    session: Session | None
    become: Become | None
    #: What the lock's exec read and ran ahead (`Host.prefetched`), each used once; a write
    #: or removal of the path drops it.
    prefetched: dict[str, tuple[FileStat | None, bytes | None]]
    speculated: dict[str, tuple[int, bytes, str]]
    if TYPE_CHECKING:

        @property
        def acting_user(self) -> str: ...
        @property
        def sftp(self) -> Any: ...
        def connected(self) -> bool: ...
        def lost(self, exc: BaseException, doing: str) -> HostUnreachable: ...
        def exec_collect(
            self, command: str, stdin: bytes | None, timeout: float | None
        ) -> tuple[int, bytes, bytes, bool]: ...

    def ran_ahead(self, command: str) -> tuple[int, bytes, str] | None:
        return self.speculated.pop(command, None)

    def forget_read_ahead(self) -> None:
        self.prefetched.clear()
        self.speculated.clear()

    def _helper_error(self, doing: str, path: str, exc: Exception) -> Exception:
        if isinstance(exc, SessionLost):
            return self.lost(exc, f"{doing} {path}")
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

    def _sftp_error(self, exc: BaseException, doing: str, path: str) -> Exception:
        """A filesystem error (StepFailed) or a lost connection: SFTP reports a full disk and
        the like as a bare "Failure", so the connection's liveness tells the two apart."""
        if isinstance(exc, PermissionError):
            return PermissionDenied(self.name, path, self.acting_user, self.become is not None)
        if isinstance(exc, OSError) and self.connected():
            reason = exc.strerror or str(exc) or type(exc).__name__
            if reason == "Failure":  # SFTP's catch-all status, in practice ENOSPC or EROFS
                reason = "Failure (the filesystem may be full or read-only)"
            return StepFailed(f"{self.name}: failed {doing} {path}: {reason}")
        return self.lost(exc, f"{doing} {path}")

    def _call(self, args: dict[str, Any], payload: bytes = b"", *, wait: bool, doing: str) -> Call:
        """Send one request to the helper; with ``wait``, collect it (and all before it).
        `StepFailed` without the lock: only its helper writes (nothing over SFTP)."""
        session = self.session
        path = str(args.get("path", ""))
        if session is None:
            raise StepFailed(f"{self.name}: {doing} {path} needs the host's lock")
        try:
            call = session.call(args, payload)
            if wait:
                session.wait()
        except (CallFailed, NoHelper, SessionLost) as exc:
            raise self._helper_error(doing, path, exc) from exc
        return call

    def flush(self) -> None:
        """`Host.flush`: `StepFailed` when a write, saved copy or record failed (those after it
        were skipped), `HostUnreachable` when the connection was lost."""
        session = self.session
        if session is None:
            return
        try:
            session.wait()
        except (CallFailed, NoHelper, SessionLost) as exc:
            raise self._helper_error("writing", "", exc) from exc

    def read_ahead(self, paths: list[str]) -> None:
        """Without the lock (``--check``): read ``paths`` through the helper (as `fetch` reads
        under the lock) in one exec, for `fetch`; a host without python3 leaves them to SFTP."""
        if self.session is not None or not paths:
            return
        answers = Session(None)  # frames the requests and parses the answers as the lock's does
        calls = [answers.call({"op": "read", "path": path}) for path in paths]
        command = (
            "p=$(command -v /usr/bin/python3 || command -v /usr/local/bin/python3 || "
            f'command -v python3) && exec "$p" -I -S -c {shlex.quote(HELPER_SOURCE)} once'
        )
        status, out, _, _ = self.exec_collect(command, answers.held(), 60)
        if status != 0:
            return
        answers.feed(out)
        with contextlib.suppress(CallFailed, SessionLost):  # a short answer ends the reading
            answers.wait()
        for path, call in zip(paths, calls, strict=True):
            if call.ok:
                self.prefetched[path] = fetch_answer(path, call)

    def stat(self, path: str) -> FileStat | None:
        """lstat ``path`` (over SFTP); None when it does not exist."""
        self.ops["sftp"] += 1
        try:
            attrs = self.sftp.lstat(path)
        except FileNotFoundError:
            return None
        except SFTP_ERRORS as exc:
            raise self._sftp_error(exc, "reading the status of", path) from exc
        return FileStat(
            path=path,
            mode=int(attrs.st_mode or 0),
            uid=int(attrs.st_uid or 0),
            gid=int(attrs.st_gid or 0),
            size=int(attrs.st_size or 0),
            mtime=float(attrs.st_mtime or 0),
        )

    def fetch(self, path: str) -> tuple[FileStat | None, bytes | None]:
        """lstat ``path`` and, if it is a regular file, read it — never through a symlink:
        what the lock's exec prefetched (once), else one helper request (``O_NOFOLLOW``, status
        and bytes from one fd), else without the lock an SFTP lstat and read."""
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

    def _sftp_read(self, path: str) -> bytes:
        """The whole file over SFTP (follows a symlink: for tools that only look)."""
        self.ops["sftp"] += 3
        try:
            with self.sftp.open(path, "rb") as handle:
                handle.prefetch()
                data: bytes = handle.read()
                return data
        except FileNotFoundError:
            raise
        except SFTP_ERRORS as exc:
            raise self._sftp_error(exc, "reading", path) from exc

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

    def write_atomic(self, path: str, data: bytes, **options: Unpack[WriteOptions]) -> Call | None:
        """Replace ``path`` with ``data`` so that no reader ever sees a partial file, through
        the helper (`FILES_RULE`, `WriteOptions`). Sent without waiting unless ``wait``: a
        failure surfaces at the next `flush` (or command), and nothing sent after it happens
        on the host. Returns the request: a failed answer means the target was not touched."""
        self.prefetched.pop(path, None)
        args: dict[str, Any] = {"op": "write", "path": path}
        args.update((key, options.get(key)) for key in ("expect_sha256", "unsafe_dir", "hardlinks"))
        if (mode := options.get("mode")) is not None:
            meta = {key: options.get(key) for key in ("uid", "gid", "xattrs")}
            args["meta"] = {**meta, "mode": statmod.S_IMODE(mode)}
        known = options.get("known")
        if known is not None and not ablation.off("splice"):
            source, before = known
            head, tail = shared_ends(before, data)
            args["splice"] = {"path": source, "head": head, "tail": tail,
                              "sha256": hashlib.sha256(before).hexdigest(),
                              "result": hashlib.sha256(data).hexdigest()}  # fmt: skip
            data = data[head : len(data) - tail]
        return self._call(args, data, wait=options.get("wait", False), doing="writing")

    def remove_temp_leftovers(self, path: str) -> list[str]:
        """Remove (and return) the temp files an interrupted `write_atomic` of ``path`` left
        beside it: a cut connection stops a write before its cleanup, which leaves
        ``.NAME.deploy-XXXXXXXX.tmp`` where a loader that globs the directory may pick it up.
        Undo calls this under the lock, so no run of ours can be writing there."""
        call = self._call({"op": "remove_temps", "path": path}, wait=True, doing="cleaning")
        return [str(name) for name in (call.answer or {}).get("removed", [])]

    def remove(self, path: str) -> None:
        """Unlink ``path`` (a missing one is fine); waits for the answer."""
        self.prefetched.pop(path, None)
        self._call({"op": "remove", "path": path}, wait=True, doing="removing")

    def append_file(self, path: str, data: bytes, *, durable: bool) -> Call | None:
        """Append ``data`` to ``path`` (created 0600; a journal), fsynced when ``durable``, sent
        without waiting (served in order: module docstring); the request's answer says later
        whether it was appended (`Journal.settle`)."""
        args = {"op": "append", "path": path, "durable": durable}
        return self._call(args, data, wait=False, doing="appending to")

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        """Create one directory level (its parent must exist; an existing one is fine), sent
        without waiting (a failure surfaces at `flush`)."""
        self._call({"op": "mkdir", "path": path, "mode": mode}, wait=False, doing="creating")

    def listdir(self, path: str) -> list[str]:
        """Sorted names in ``path`` (SFTP; a missing directory is empty)."""
        self.ops["sftp"] += 1
        try:
            return sorted(self.sftp.listdir(path))
        except FileNotFoundError:
            return []
