"""File mechanics shared by every step that reads or changes a file, and their undo.

Reads go through the run's cache, so a file is fetched once per run however many steps look at
it. A change is: save the original (once per run, content-addressed under ``state_dir``, never
beside the file), journal the intent with both checksums and the file's mode and owner, write
atomically, journal done. Undo reverses exactly that, and refuses to overwrite a file whose
content is no longer what we wrote.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from deploy.edits.text import unified_diff
from deploy.errors import ForeignChange, RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.remote.host import sha256
from deploy.steps.base import FileChange, FileState, Planned, Step, StepContext


def read_file(ctx: StepContext, path: str) -> FileState:
    """The file's current content as this run knows it; fetched from the host the first time.

    Raises:
        StepFailed: the path is missing, not absolute, a symlink or not a regular file.
    """
    cached = ctx.files.get(path)
    if cached is not None:
        return cached
    if not path.startswith("/"):
        raise StepFailed(f"{ctx.host}: {path!r} is not an absolute path")
    info, content = ctx.remote.fetch(path)
    if info is None:
        raise StepFailed(f"{ctx.host}: {path} does not exist; nothing was changed")
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


def save_original(ctx: StepContext, state: FileState) -> str:
    """Save the run's original copy of a file (once); return its sha256."""
    digest = ctx.saved.get(state.path)
    if ctx.check_mode:
        return digest or sha256(state.original)
    if digest is None:
        digest = ctx.journal.save_copy(state.original)
        ctx.saved[state.path] = digest
        ctx.journal.write(
            {"event": "backup", "path": state.path, "sha256": digest, "step": ctx.step_index}
        )
    return digest


def before_change(ctx: StepContext) -> None:
    """Save every file a ``backup`` step named; called right before any change to the host."""
    while ctx.pending_backups:
        save_original(ctx, read_file(ctx, ctx.pending_backups.pop(0)))


def write_file(
    ctx: StepContext,
    path: str,
    content: bytes,
    *,
    unsafe_dir: bool = False,
    hardlinks: str = "refuse",
) -> None:
    """Change a file on the host: back up, journal the intent, write atomically, journal done.

    All four are sent to the host's helper without waiting, in that order, which the helper
    keeps: the saved copy and the intent are fsynced before the write starts. The write itself
    is a compare-and-swap — refused unless the file still holds what this run read, checked on
    the fd the helper opened — so nobody's change made since the read is lost. A failure
    surfaces at the run's next wait (`Host.flush`, or a command), and nothing sent after
    it (the ``done`` record, a restart) happens.
    """
    state = read_file(ctx, path)
    if content == state.content:
        return
    if ctx.check_mode:
        state.content = content
        return
    before_change(ctx)
    backup = save_original(ctx, state)
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
    change = ctx.remote.write_atomic(
        path,
        content,
        expect_sha256=sha256(state.content),
        unsafe_dir=unsafe_dir,
        hardlinks=hardlinks,
    )
    ctx.journal.guard(change)
    ctx.journal.write({"event": "done", "op": "write", "step": ctx.step_index, "path": path})
    state.content = content
    state.stat = replace(state.stat, size=len(content))


class EditStep(Step):
    """A step that computes a file's new content from its current content (pure) and writes it."""

    mutating = True

    @property
    def path(self) -> str:
        # Every edit step's arguments model has a path; BaseModel does not say so.
        return str(self.args.path)  # type: ignore[attr-defined]

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
                unsafe_dir=bool(getattr(self.args, "unsafe_dir", False)),
                hardlinks=str(getattr(self.args, "hardlinks", "refuse")),
            )


# --- undo --------------------------------------------------------------------------------------


@dataclass
class UndoOutcome:
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
        return UndoOutcome(path, "already original")
    if not force:
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
        )
        check = remote.read(path)
    except (StepFailed, FileNotFoundError) as exc:
        raise RollbackFailed(f"{remote.name}: could not restore {path}: {exc}") from exc
    if sha256(check) != want:
        raise RollbackFailed(
            f"{remote.name}: restored {path} but its sha256 does not match the saved copy"
        )
    return UndoOutcome(path, "restored", f"sha256 {want[:12]}")
