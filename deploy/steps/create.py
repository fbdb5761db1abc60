"""Files and directories a step creates, and their undo: what undo removes rather than restores.

``lineinfile`` with ``create``, ``copy`` and ``template`` may write a file that did not exist,
and, with ``create_dirs``, the directories above it. Undo of such a file is its removal, not a
restore: there is no original. Each creation is journaled before it is made, as every change
is: a ``mkdir`` intent per directory level (top first), a ``create`` intent for the file with
the sha256 of what is written. A later step of the same run that edits the created file
(``append`` after ``copy``) journals another ``create`` intent, not a ``write``: the file still
had no original, and undo must remove it whatever of our contents it holds.

Undo (`CreateUndo`, `DirUndo`): a created file is removed only if it holds one of the contents
this run wrote there (or is gone already); anything else is someone else's change, refused like
a changed file (`ForeignChange`, ``--force`` overrides). A created directory is removed when
it is empty once our files are gone (``rmdir``, which never removes anything else), kept and
said otherwise.
"""

from __future__ import annotations

import stat as statmod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from deploy.errors import ForeignChange, RollbackFailed, StepFailed
from deploy.statedir.records import Record, Undone, sha256
from deploy.steps.base import FileState, Recorder, RecordUndo, StepContext

if TYPE_CHECKING:
    from deploy.remote.api import Host
    from deploy.remote.calls import FileStat

#: Mode of a created file when the step gives none (Ansible's, under the usual umask 022).
DEFAULT_FILE_MODE = 0o644
#: Mode of a directory ``create_dirs`` makes.
DIR_MODE = 0o755


@dataclass(frozen=True, kw_only=True)
class CreateIntent(Record):
    """Fsynced before a file that did not exist is written: undo removes it."""

    EVENT = "intent"
    OP = "create"
    step: int = 0
    path: str
    after: str
    mode: int
    size: int


@dataclass(frozen=True, kw_only=True)
class MkdirIntent(Record):
    """Fsynced before a directory level is created (``create_dirs``): undo removes it if empty."""

    EVENT = "intent"
    OP = "mkdir"
    step: int = 0
    path: str


def read_optional(ctx: StepContext, path: str) -> FileState | None:
    """The file as this run knows it, or None when it does not exist (yet): one fetch.

    Raises:
        StepFailed: the path is not absolute, is a symlink, or is not a regular file.
    """
    from deploy.steps.files import read_file_or_none

    return read_file_or_none(ctx, path)


def missing_dirs(ctx: StepContext, path: str, *, create_dirs: bool) -> list[str]:
    """The directories above ``path`` that do not exist, top first (to create them in order).

    Raises:
        StepFailed: one is missing and ``create_dirs`` is off, or an ancestor is not a
            directory (a file, a symlink: never followed).
    """
    missing: list[str] = []
    directory = path.rpartition("/")[0] or "/"
    while True:
        info = _stat(ctx, directory)
        if info is not None:
            if not statmod.S_ISDIR(info.mode):
                raise StepFailed(f"{ctx.host}: {directory} is not a directory; nothing was changed")
            break
        missing.insert(0, directory)
        directory = directory.rpartition("/")[0] or "/"
    if missing and not create_dirs:
        raise StepFailed(
            f"{ctx.host}: directory {missing[0]} does not exist; set create_dirs: true to "
            "create it; nothing was changed"
        )
    return missing


def _stat(ctx: StepContext, path: str) -> FileStat | None:
    if path == "/":
        from deploy.remote.calls import FileStat

        return FileStat(path="/", mode=statmod.S_IFDIR | 0o755, uid=0, gid=0, size=0, mtime=0)
    info, _ = ctx.remote.fetch(path)
    return info


def planned_state(
    ctx: StepContext,
    path: str,
    content: bytes,
    mode: int | None,
    uid: int | None = None,
    gid: int | None = None,
) -> FileState:
    """Record in the run's cache that ``path`` holds (or, under --check, would hold) ``content``,
    a file this run creates: later steps of the run read it from here."""
    from deploy.remote.calls import FileStat

    # uid/gid -1 when not chosen: "unchanged" to fchown, should anything pass them on.
    info = FileStat(
        path=path,
        mode=statmod.S_IFREG | (DEFAULT_FILE_MODE if mode is None else mode),
        uid=-1 if uid is None else uid,
        gid=-1 if gid is None else gid,
        size=len(content),
        mtime=0,
    )
    state = FileState(path=path, content=content, stat=info, original=b"", created=True)
    ctx.files[path] = state
    return state


def create_file(
    ctx: StepContext,
    path: str,
    content: bytes,
    *,
    dirs: list[str],
    mode: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
    unsafe_dir: bool = False,
    hardlinks: Literal["refuse", "allow"] = "refuse",
) -> None:
    """Create ``dirs`` (top first) and the file ``path`` with ``content``, each journaled first.

    Also how a later edit of a file created in this run is written (`write_file` comes here
    for a `FileState` with ``created``): then the file must still hold what this run wrote
    (compare-and-swap on the host), and keeps the owner and mode it was created with. The
    write goes through the same atomic helper as every write (O_EXCL temp in the directory,
    owner, mode, fsync, rename, directory fsync).
    """
    from deploy.steps.files import before_change

    state = ctx.files.get(path)
    earlier = state if state is not None and state.created else None
    if earlier is not None:
        if earlier.content == content:
            return
        mode = earlier.stat.permissions if mode is None else mode
        uid = earlier.stat.uid if uid is None and earlier.stat.uid >= 0 else uid
        gid = earlier.stat.gid if gid is None and earlier.stat.gid >= 0 else gid
    final_mode = DEFAULT_FILE_MODE if mode is None else mode
    if ctx.check_mode:
        planned_state(ctx, path, content, final_mode, uid, gid)
        return
    before_change(ctx)
    if dirs:
        _make_dirs(ctx, dirs)
    ctx.journal.write(
        {
            "event": "intent",
            "op": "create",
            "step": ctx.step_index,
            "path": path,
            "after": sha256(content),
            "mode": final_mode,
            "size": len(content),
        }
    )
    ctx.changed = True
    change = ctx.remote.write_atomic(
        path,
        content,
        mode=final_mode,
        uid=uid,
        gid=gid,
        expect_sha256=sha256(earlier.content) if earlier is not None else None,
        unsafe_dir=unsafe_dir,
        hardlinks=hardlinks,
    )
    ctx.journal.guard(change)
    ctx.journal.write({"event": "done", "op": "create", "step": ctx.step_index, "path": path})
    planned_state(ctx, path, content, final_mode, uid, gid)


def _make_dirs(ctx: StepContext, dirs: list[str]) -> None:
    """Create ``dirs`` (top first), each journaled first, with exactly mode 0755.

    ``mkdir -m`` in the lock's shell rather than the file helper's ``mkdir``: the helper runs
    under the lock's umask 077, which would leave the directory readable by its owner only,
    and a server running as another user could not read the file put there. ``mkdir`` fails
    on a name that exists (someone made it since we looked): the step fails and is undone.
    """
    from deploy.remote.host import quote

    for directory in dirs:
        ctx.journal.write(
            {"event": "intent", "op": "mkdir", "step": ctx.step_index, "path": directory}
        )
    ctx.changed = True
    made = " && ".join(f"mkdir -m {DIR_MODE:04o} -- {quote(d)}" for d in dirs)
    result = ctx.remote.run(made, timeout=30)
    if not result.ok:
        raise StepFailed(f"{ctx.host}: could not create {dirs[0]}: {result.tail(2)}")
    for directory in dirs:
        ctx.journal.write(
            {"event": "done", "op": "mkdir", "step": ctx.step_index, "path": directory}
        )


# --- undo --------------------------------------------------------------------------------------


def _current(remote: Host, path: str) -> bytes | None:
    try:
        return remote.read(path)
    except FileNotFoundError:
        return None
    except StepFailed as exc:
        raise RollbackFailed(f"{remote.name}: cannot read {path} to remove it: {exc}") from exc


class CreateUndo(RecordUndo):
    """Undo of ``create`` intents: each file removed if it holds what the run wrote."""

    op = "create"
    phase = 0

    def check(self, records: list[dict[str, Any]]) -> None:
        self.written: dict[str, set[str]] = {}
        for event in records:
            self.written.setdefault(str(event["path"]), set()).add(str(event["after"]))
        if self.force:
            return
        for path, shas in self.written.items():
            current = _current(self.remote, path)
            if current is not None and sha256(current) not in shas:
                raise ForeignChange(
                    f"{self.remote.name}: {path} changed since deploy created it (sha256 "
                    f"{sha256(current)[:12]}); not removed. Inspect it, then `deploy rollback "
                    "--force` to remove it anyway"
                )

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        lines: list[str] = []
        done: set[str] = set()
        for event in reversed(records):
            path = str(event["path"])
            if path in done:
                continue
            done.add(path)
            try:
                self.remote.remove_temp_leftovers(path)
                current = _current(self.remote, path)
                if current is None:
                    action = "already removed"
                else:
                    if not self.force and sha256(current) not in self.written.get(path, set()):
                        raise ForeignChange(f"{self.remote.name}: {path} changed; not removed")
                    self.remote.remove(path)
                    action = "removed"
            except StepFailed as exc:
                raise RollbackFailed(f"{self.remote.name}: could not remove {path}: {exc}") from exc
            journal.write(Undone(op="create", path=path, action=action))
            lines.append(f"{action} {path} (created by the run)")
        return lines


class DirUndo(RecordUndo):
    """Undo of ``mkdir`` intents: each directory removed, deepest first, if it is empty."""

    op = "mkdir"
    phase = 0

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        from deploy.remote.host import quote

        lines: list[str] = []
        for event in reversed(records):
            path = str(event["path"])
            result = self.remote.run(
                f"if [ -d {quote(path)} ] && [ ! -L {quote(path)} ]; then "
                f"rmdir -- {quote(path)} 2>/dev/null || echo kept; else echo gone; fi",
                timeout=30,
            )
            said = result.stdout.strip()
            action = {"": "removed", "gone": "already removed"}.get(said, "kept (not empty)")
            journal.write(Undone(op="mkdir", path=path, action=action))
            lines.append(f"{action} directory {path}")
        return lines
