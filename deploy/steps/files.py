"""File mechanics shared by every step that reads or changes a file, and their undo.

The edit steps (``python_insert``, ``patch``, ``append``) are `EditStep` subclasses: each
module declares only its arguments (a `FileWriteOptions`) and its pure ``edit``; reading,
writing, journaling (`WriteIntent`) and undo (`FileUndo`, the handler of ``write`` intents)
live here once.

Reads go through the run's cache, so a file is fetched once per run however many steps look at
it. A change is: save the original (once per run, content-addressed under ``state_dir``, never
beside the file), journal the intent with both checksums and the file's mode and owner, write
atomically, journal done. Undo reverses exactly that, and refuses to overwrite a file whose
content is no longer what we wrote.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.edits.text import unified_diff
from deploy.errors import ForeignChange, RollbackFailed, StepFailed
from deploy.statedir.records import Backup, Done, Record, Undone, WriteIntent, sha256
from deploy.steps.base import (
    FileChange,
    FileState,
    Planned,
    Recorder,
    RecordUndo,
    Step,
    StepContext,
)

if TYPE_CHECKING:
    from deploy.remote.api import Host
    from deploy.remote.calls import FileStat


class FileWriteOptions(StrictModel):
    """How far a step that writes a file may go where the host is shared (issue 14)."""

    #: Listed after the step's own keys in "allowed:" messages (`deploy.config.errors`).
    KEYS_LAST: ClassVar[bool] = True

    if TYPE_CHECKING:  # every writing step's own model declares it, first among its keys
        path: str

    unsafe_dir: bool = Field(
        default=False,
        description="Write even when the file's directory is writable by group or others, or "
        "owned by someone other than root or the login user (refused by default, as OpenSSH's "
        "StrictModes refuses: another user could swap names in it).",
    )
    hardlinks: Literal["refuse", "allow"] = Field(
        default="refuse",
        description="'allow': replace a file that has other hard links (its other names keep "
        "the old content); refused by default.",
    )


EditArgsT = TypeVar("EditArgsT", bound=FileWriteOptions)


def read_file(ctx: StepContext, path: str) -> FileState:
    """The file's current content as this run knows it; fetched from the host the first time.

    Raises:
        StepFailed: the path is missing, not absolute, a symlink or not a regular file.
    """
    state = read_file_or_none(ctx, path)
    if state is None:
        raise StepFailed(f"{ctx.host}: {path} does not exist; nothing was changed")
    return state


def read_file_or_none(ctx: StepContext, path: str) -> FileState | None:
    """`read_file`, but None when nothing exists at ``path`` (a step that may create it).

    Raises:
        StepFailed: the path is not absolute, is a symlink, or is not a regular file.
    """
    cached = ctx.files.get(path)
    if cached is not None:
        return cached
    if not path.startswith("/"):
        raise StepFailed(f"{ctx.host}: {path!r} is not an absolute path")
    info, content = ctx.remote.fetch(path)
    if info is None:
        return None
    if info.is_symlink:
        # Following it would change a file the playbook does not name; replacing it would
        # break the link. Refuse, and say which path to use instead.
        raise StepFailed(f"{ctx.host}: {path} is a symlink; name the file it points to instead")
    if not info.is_file:
        raise StepFailed(f"{ctx.host}: {path} is not a regular file")
    if content is None:
        raise StepFailed(f"{ctx.host}: {path} disappeared while being read; nothing was changed")
    state = FileState(path=path, content=content, stat=info, original=content)
    ctx.files[path] = state
    return state


def save_original(ctx: StepContext, state: FileState, *, writing: bool = False) -> str:
    """Save the run's original copy of a file (once); return its sha256.

    ``writing``: a write of this file follows, refused unless the file still holds what the
    run read. Then, if no step that may change files behind the run's cache (a command, a
    restart) ran since the read, the copy is made on the host from the file itself (nothing
    sent): should the file have changed anyway, the copy is refused with the write it
    precedes. Otherwise (a ``backup`` saved at the first change, maybe after a command
    rewrote the file; a file this run created; an edit after such a command) the run sends
    the bytes it read: the copy is the original whatever the file holds now, the one a human
    puts back when the run's own command changed the file and the edit was refused."""
    digest = ctx.saved.get(state.path)
    if ctx.check_mode:
        return digest or sha256(state.original)
    if digest is None:
        # Not yet written by this run, nor maybe rewritten by one of its commands.
        unchanged = writing and not state.stale and state.content == state.original
        digest = ctx.journal.save_copy(state.original, state.path if unchanged else None)
        ctx.saved[state.path] = digest
        ctx.journal.write(
            {"event": "backup", "path": state.path, "sha256": digest, "step": ctx.step_index}
        )
    return digest


def before_change(ctx: StepContext, writing: str | None = None) -> None:
    """Save every file a ``backup`` step named; called right before any change to the host
    (``writing``: the file that change writes, `save_original`'s ``writing``).

    The first call opens the engine's "before the first change" phase first
    (`StepContext.first_change`): the host is seen as it was before anything is saved."""
    ctx.first_change()
    while ctx.pending_backups:
        path = ctx.pending_backups.pop(0)
        save_original(ctx, read_file(ctx, path), writing=path == writing)


def write_file(
    ctx: StepContext,
    path: str,
    content: bytes,
    *,
    unsafe_dir: bool = False,
    hardlinks: Literal["refuse", "allow"] = "refuse",
    mode: int | None = None,
    uid: int | None = None,
    gid: int | None = None,
) -> None:
    """Change a file on the host: back up, journal the intent, write atomically, journal done.

    ``mode``/``uid``/``gid``: what the file should have (None: keep its own). A file whose
    bytes are right but whose owner or mode is not is rewritten with the same bytes: the
    change is the metadata, journaled like any write, and undo restores the old one. A file
    this run created (``copy``, ``template``, ``lineinfile`` with ``create``) is written by
    `deploy.steps.create.create_file`: undo removes it rather than restore an original.

    All four are sent to the host's helper without waiting, in that order, which the helper
    keeps: the saved copy and the intent are fsynced before the write starts. The write itself
    is a compare-and-swap — refused unless the file still holds what this run read, checked on
    the fd the helper opened — so nobody's change made since the read is lost. A failure
    surfaces at the run's next wait (`Host.flush`, or a command), and nothing sent after
    it (the ``done`` record, a restart) happens.
    """
    state = read_file(ctx, path)
    if state.created:
        from deploy.steps.create import create_file

        create_file(ctx, path, content, dirs=[], mode=mode, uid=uid, gid=gid,
                    unsafe_dir=unsafe_dir, hardlinks=hardlinks)  # fmt: skip
        return
    info = state.stat
    meta = (
        info.permissions if mode is None else mode,
        info.uid if uid is None else uid,
        info.gid if gid is None else gid,
    )
    if content == state.content and meta == (info.permissions, info.uid, info.gid):
        return
    if ctx.check_mode:
        state.content = content
        state.stat = _with_meta(info, meta, len(content))
        return
    before_change(ctx, path)
    backup = save_original(ctx, state, writing=True)
    record: dict[str, Any] = {
        "event": "intent",
        "op": "write",
        "step": ctx.step_index,
        "path": path,
        "before": sha256(state.content),
        "after": sha256(content),
        "original": backup,
        "mode": state.stat.permissions,
        "uid": state.stat.uid,
        "gid": state.stat.gid,
        # What undo restores besides the bytes: POSIX ACLs and capabilities are xattrs.
        "xattrs": state.stat.xattrs,
        "size": len(content),
    }
    ctx.journal.write(record)
    ctx.changed = True
    new_meta = meta != (info.permissions, info.uid, info.gid)
    change = ctx.remote.write_atomic(
        path,
        content,
        # All three when any changes: the helper would give the temp file's owner otherwise.
        mode=meta[0] if new_meta else None,
        uid=meta[1] if new_meta else None,
        gid=meta[2] if new_meta else None,
        expect_sha256=sha256(state.content),
        unsafe_dir=unsafe_dir,
        hardlinks=hardlinks,
        known=(path, state.content),
    )
    ctx.journal.guard(change)
    ctx.journal.write({"event": "done", "op": "write", "step": ctx.step_index, "path": path})
    state.content = content
    state.stat = _with_meta(info, meta, len(content))


def _with_meta(info: FileStat, meta: tuple[int, int, int], size: int) -> FileStat:
    """``info`` as it is once the file holds ``size`` bytes with mode, uid and gid ``meta``."""
    mode = (info.mode & ~0o7777) | meta[0]
    return replace(info, mode=mode, uid=meta[1], gid=meta[2], size=size)


class EditStep(Step[EditArgsT]):
    """A step that computes a file's new content from its current content (pure) and writes it."""

    mutating = True
    confined = True
    records: ClassVar[tuple[type[Record], ...]] = (Backup, WriteIntent, Done)

    @classmethod
    def undo_handler(cls) -> type[RecordUndo]:
        return FileUndo

    @property
    def path(self) -> str:
        return self.args.path

    def reads(self) -> list[str]:
        return [self.path]

    def describe(self) -> str:
        return f"{self.kind} {self.path}"

    def edit(self, content: bytes) -> tuple[bytes, str]:
        """Return the new content and a one-line summary (pure; raise EditError on conflict)."""
        raise NotImplementedError

    def plan(self, ctx: StepContext) -> Planned:
        state = read_file(ctx, self.path)
        new, summary = self.edit(state.content)
        if new == state.content:
            return Planned(summary=summary, noop=True)
        diff = unified_diff(state.content, new, self.path)
        return Planned(summary=summary, changes=[FileChange(self.path, state.content, new, diff)])

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        for change in planned.changes:
            write_file(
                ctx,
                change.path,
                change.after,
                unsafe_dir=self.args.unsafe_dir,
                hardlinks=self.args.hardlinks,
            )


# --- undo --------------------------------------------------------------------------------------


@dataclass
class UndoOutcome:
    """What undoing one file write did, as the rollback report says it."""

    path: str
    action: str  # "restored", "already original", "refused", "failed"
    detail: str = ""


def _refuse_foreign(
    remote: Host,
    record: dict[str, Any],
    current_sha: str | None,
    written: Collection[str] = (),
) -> None:
    """Raise `ForeignChange` unless the file holds what we wrote or the original.

    ``written``: every sha256 this run wrote to the path. A run that edits one file twice and
    dies between the two writes leaves the first write's content, which is ours to undo too.
    """
    if current_sha in (record.get("after"), record.get("original")) or current_sha in written:
        return
    path = str(record["path"])
    seen = "missing" if current_sha is None else f"sha256 {current_sha[:12]}"
    raise ForeignChange(
        f"{remote.name}: {path} changed since deploy wrote it ({seen}, we wrote "
        f"{str(record.get('after'))[:12]}); not restored. Inspect it, then "
        "`deploy rollback --force` to restore the saved copy anyway"
    )


def check_undoable(remote: Host, record: dict[str, Any], written: Collection[str] = ()) -> None:
    """Refuse (`ForeignChange`) before anything is undone if ``record``'s file changed since.

    Undo is all or nothing: checking every file first means a refusal leaves the host exactly
    as it was found — no service stopped, no other file restored — rather than half undone.

    Raises:
        ForeignChange: someone changed the file since deploy wrote it.
        RollbackFailed: it cannot be read.
    """
    path = str(record["path"])
    current = _read_current(remote, path)
    _refuse_foreign(remote, record, None if current is None else sha256(current), written)


def _read_current(remote: Host, path: str) -> bytes | None:
    """The file's content now (None if it is gone), for the undo checks."""
    try:
        return remote.read(path)
    except FileNotFoundError:
        return None
    except StepFailed as exc:
        raise RollbackFailed(f"{remote.name}: cannot read {path} to restore it: {exc}") from exc


def undo_write(
    remote: Host,
    record: dict[str, Any],
    original: bytes,
    *,
    force: bool = False,
    written: Collection[str] = (),
) -> UndoOutcome:
    """Put a file back to its original content, from a journal ``intent`` record.

    The file must hold what we wrote (``after``) or still the original (``before``: the write
    never happened). Anything else means someone changed it since: refused (`ForeignChange`)
    unless ``force``. The restored file is read back and its sha256 checked.

    Raises:
        ForeignChange: the file changed since we wrote it and ``force`` is false.
        RollbackFailed: the original could not be written back or does not check out.
    """
    path = str(record["path"])
    want = sha256(original)
    try:
        # An interrupted write leaves its partial temp copy beside the target: not ours to keep.
        remote.remove_temp_leftovers(path)
    except StepFailed as exc:
        raise RollbackFailed(f"{remote.name}: cannot clean up beside {path}: {exc}") from exc
    current = _read_current(remote, path)
    current_sha = None if current is None else sha256(current)
    if current_sha == want:
        if _meta_as_recorded(remote, path, record):
            return UndoOutcome(path, "already original")
    elif not force:
        _refuse_foreign(remote, record, current_sha, written)
    try:
        xattrs = record.get("xattrs")
        remote.write_atomic(
            path,
            original,
            mode=int(record.get("mode", 0o644)),
            uid=record.get("uid"),
            gid=record.get("gid"),
            xattrs=dict(xattrs) if isinstance(xattrs, dict) else None,
            # Putting back what was there: the run already wrote in this directory, and a
            # target it split is not made worse by restoring its original name.
            unsafe_dir=True,
            hardlinks="allow",
            # What is there now was just read: only the stretch that differs goes back (and
            # nothing is written if it changed meanwhile: a change we never saw is not lost).
            known=None if current is None else (path, current),
        )
        check = remote.read(path)
    except (StepFailed, FileNotFoundError) as exc:
        raise RollbackFailed(f"{remote.name}: could not restore {path}: {exc}") from exc
    if sha256(check) != want:
        raise RollbackFailed(
            f"{remote.name}: restored {path} but its sha256 does not match the saved copy"
        )
    return UndoOutcome(path, "restored", f"sha256 {want[:12]}")


def _meta_as_recorded(remote: Host, path: str, record: dict[str, Any]) -> bool:
    """Whether ``path`` has the mode and owner ``record`` saved (a write that changed only
    those — ``copy`` with ``mode`` — left the bytes as they were)."""
    try:
        info, _ = remote.fetch(path)
    except StepFailed as exc:
        raise RollbackFailed(f"{remote.name}: cannot read {path} to restore it: {exc}") from exc
    if info is None:
        return False
    want = (record.get("mode"), record.get("uid"), record.get("gid"))
    return (info.permissions, info.uid, info.gid) == want


class FileUndo(RecordUndo):
    """Undo of ``write`` intents: every saved copy checked, then the files restored newest
    first, each only if it holds what the run wrote (or ``force``)."""

    op = "write"
    phase = 0

    def check(self, records: list[dict[str, Any]]) -> None:
        """Read and check every saved copy; refuse a file someone changed since (unless
        ``force``), judged by the newest record of each path."""
        self.copies: dict[str, bytes] = {}
        self.written: dict[str, set[str]] = {}
        newest: dict[str, dict[str, Any]] = {}
        for event in records:
            path = str(event["path"])
            newest[path] = event
            self.written.setdefault(path, set()).add(str(event.get("after")))
            digest = str(event["original"])
            if digest not in self.copies:
                self.copies[digest] = self.saved_copy(digest)
        if not self.force:
            for path, event in newest.items():
                check_undoable(self.remote, event, self.written[path])

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        lines = []
        for event in reversed(records):
            path = str(event["path"])
            outcome = undo_write(
                self.remote,
                event,
                self.copies[str(event["original"])],
                force=self.force,
                written=self.written[path],
            )
            journal.write(Undone(op="write", path=outcome.path, action=outcome.action))
            lines.append(
                f"{outcome.action} {outcome.path}"
                + (f" ({outcome.detail})" if outcome.detail else "")
            )
        return lines
