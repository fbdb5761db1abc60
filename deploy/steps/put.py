"""What ``copy`` and ``template`` share: a whole file's content, owner and mode, put in place.

Both steps come down to "``dest`` holds these bytes, with this mode and owner": ``copy`` takes
the bytes from ``content`` or from ``src`` beside the playbook, ``template`` renders ``src`` with
the host's variables (both read while the playbook is resolved: `read_local_files`, so a
missing file is bad input before any host is touched). The step then plans like every edit
step — the file read once through the run's cache, the change shown as a diff, nothing written
when content, mode and owner are already right — and writes through the same journaled,
atomic, fd-based helper (`deploy.steps.files.write_file`; a new file:
`deploy.steps.create.create_file`, which undo removes).

``validate``: as Ansible's, a command with ``%s`` that must exit 0 before the file is put in
place. Ansible runs it on its own temporary copy of the content (in its remote tmp directory)
before the atomic move; here it runs on a private ``mktemp`` copy of the exact bytes in
``state_dir`` (only root or the login user can write there), its path passed to the command
as a quoted argument, before the atomic write. A failure leaves the destination untouched
and nothing journaled. Not run under ``--check``.

``diff: false``: for secret content. The plan, the report (``--json``, history, the webhook,
the log) say that the file changes, never what is in it: no diff, no checksum, no size, and
a failed ``validate`` reports its exit status without its output.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, TypeVar

from pydantic import Field, field_validator, model_validator

from deploy.config.local_files import LocalFiles
from deploy.config.template import is_template
from deploy.edits.text import unified_diff
from deploy.errors import StepFailed
from deploy.statedir.records import Backup, Done, Record, WriteIntent
from deploy.steps.base import FileChange, Planned, RecordUndo, Step, StepContext
from deploy.steps.create import (
    DEFAULT_FILE_MODE,
    CreateIntent,
    CreateUndo,
    DirUndo,
    MkdirIntent,
    create_file,
    missing_dirs,
    read_optional,
)
from deploy.steps.files import FileUndo, FileWriteOptions, write_file

_MODE = re.compile(r"(?:0o|0)?([0-7]{3,4})")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+")
#: Seconds a ``validate`` command may run before it is killed.
VALIDATE_TIMEOUT = 300
#: How the content is decoded into, and encoded back from, the ``content`` string: any bytes
#: (a binary ``src``) survive the round trip.
CODEC = ("utf-8", "surrogateescape")


def parse_mode(text: str) -> int:
    """``"0644"``, ``"644"``, ``"0o644"``, ``"4755"`` -> the permission bits.

    Raises:
        ValueError: anything else (an unquoted YAML number, a symbolic mode).
    """
    match = _MODE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"mode {text!r} is not an octal mode such as '0644'")
    return int(match.group(1), 8)


class PutArgs(FileWriteOptions):
    """Keys shared by ``copy`` and ``template`` (after their source keys)."""

    dest: str = Field(description="Absolute path of the file on the host.")
    mode: str | None = Field(
        default=None,
        description="Octal mode, quoted ('0644', '0600'). Default: an existing file keeps its "
        "own; a new one gets 0644.",
    )
    owner: str | None = Field(
        default=None, description="User name or uid. Default: kept (a new file: the acting user)."
    )
    group: str | None = Field(
        default=None, description="Group name or gid. Default: kept (a new file: the user's)."
    )
    validate_: str | None = Field(
        default=None,
        alias="validate",
        description="Command that must exit 0 before the file is put in place; '%s' is the "
        "path of a private copy of the new content (quoted for you), as Ansible's validate. "
        "Not run under --check.",
    )
    create_dirs: bool = Field(
        default=False,
        description="Create missing directories above dest (mode 0755; undo removes them if "
        "empty). Default: a missing directory is an error.",
    )
    diff: bool = Field(
        default=True,
        description="false: never show the content (secrets): plans, reports, history and "
        "logs say only that the file changes.",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_is_text(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            raise ValueError(
                f"mode {value} is a YAML number: quote the octal mode, e.g. mode: '0644'"
            )
        if isinstance(value, str) and not is_template(value):
            parse_mode(value)
        return value

    @field_validator("owner", "group")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not is_template(value) and not _NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a user or group name, nor a number")
        return value

    @field_validator("validate_")
    @classmethod
    def _has_placeholder(cls, value: str | None) -> str | None:
        if value is None or is_template(value):
            return value
        try:
            formatted = value % ("\0",)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"validate must hold exactly one %s (write %% for a literal %): {exc}"
            ) from None
        if formatted.count("\0") != 1:
            raise ValueError("validate must hold exactly one %s (the file to check)")
        return value

    @field_validator("dest")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not is_template(value) and (not value.startswith("/") or value.endswith("/")):
            raise ValueError(f"dest {value!r} must be an absolute path to a file")
        return value


class SourcedArgs(PutArgs):
    """``src`` or ``content``: read while resolving (`read_local_files`)."""

    #: Whether ``src`` is rendered with the host's variables (``template``) or copied as is.
    RENDER: ClassVar[bool] = False

    @model_validator(mode="after")
    def _one_source(self) -> SourcedArgs:
        content = getattr(self, "content", None)
        if (getattr(self, "src", None) is None) == (content is None):
            raise ValueError("give exactly one of 'src' or 'content'")
        return self

    @classmethod
    def read_local_files(cls, args: dict[str, Any], files: LocalFiles) -> dict[str, Any]:
        """Replace ``src`` by the file's content (rendered, for a template); see
        `deploy.config.local_files`. Both keys given: left to the model to refuse."""
        name = args.get("src")
        if not isinstance(name, str) or "content" in args:
            return args
        data = files.read("src", name)
        if cls.RENDER:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise files.error("src", f"template {name} is not UTF-8: {exc.reason}") from None
            args["content"] = files.render("src", text, name)
        else:
            args["content"] = data.decode(*CODEC)
        args["src"] = None
        return args


SourcedArgsT = TypeVar("SourcedArgsT", bound=SourcedArgs)


class PutStep(Step[SourcedArgsT]):
    """Plan, apply and undo of a whole file put in place (module docstring)."""

    mutating = True
    confined = True  # reads dest (and its missing parents); runs only speculate()'s lookups
    records: ClassVar[tuple[type[Record], ...]] = (
        Backup,
        WriteIntent,
        CreateIntent,
        MkdirIntent,
        Done,
    )

    @classmethod
    def undo_handlers(cls) -> list[type[RecordUndo]]:
        return [FileUndo, CreateUndo, DirUndo]

    @property
    def dest(self) -> str:
        return str(self.args.dest)

    def describe(self) -> str:
        return f"{self.kind} {self.dest}"

    def reads(self) -> list[str]:
        # The directory too: for a file to create, whether it exists is read with the lock.
        return [self.dest, self.dest.rpartition("/")[0] or "/"]

    def content(self) -> bytes:
        return str(getattr(self.args, "content", "")).encode(*CODEC)

    def _lookups(self) -> list[tuple[str, str]]:
        """(key, command) for each owner/group given by name (numbers need no lookup)."""
        from deploy.remote.host import quote

        out = []
        for key, database in (("owner", "passwd"), ("group", "group")):
            name = getattr(self.args, key)
            if name is not None and not name.isdigit():
                out.append((key, f"getent {database} {quote(name)}"))
        return out

    def speculate(self, state_dir: str) -> list[str]:
        return [command for _, command in self._lookups()]

    def _ids(self, ctx: StepContext) -> tuple[int | None, int | None]:
        ids: dict[str, int | None] = {
            key: None if getattr(self.args, key) is None else int(getattr(self.args, key))
            for key in ("owner", "group")
            if getattr(self.args, key) is None or getattr(self.args, key).isdigit()
        }
        for key, command in self._lookups():
            ahead = ctx.remote.ran_ahead(command)
            if ahead is not None:
                status, out = ahead[0], ahead[1].decode("utf-8", "replace")
            else:
                result = ctx.remote.run(command, timeout=30)
                status, out = result.exit_status, result.stdout
            fields = out.strip().split(":")
            if status != 0 or len(fields) < 3 or not fields[2].isdigit():
                name = getattr(self.args, key)
                what = "user" if key == "owner" else "group"
                raise StepFailed(f"{ctx.host}: no {what} {name!r} on the host; nothing was changed")
            ids[key] = int(fields[2])
        return ids.get("owner"), ids.get("group")

    def _shown(self, before: bytes, after: bytes) -> str:
        if not self.args.diff:
            return f"content of {self.dest} not shown (diff: false)\n" if before != after else ""
        return unified_diff(before, after, self.dest)

    def plan(self, ctx: StepContext) -> Planned:
        new = self.content()
        mode = None if self.args.mode is None else parse_mode(self.args.mode)
        uid, gid = self._ids(ctx)
        state = read_optional(ctx, self.dest)
        data: dict[str, Any] = {"mode": mode, "uid": uid, "gid": gid}
        if state is None:
            data["dirs"] = missing_dirs(ctx, self.dest, create_dirs=self.args.create_dirs)
            final = DEFAULT_FILE_MODE if mode is None else mode
            made = f", with {len(data['dirs'])} new directories" if data["dirs"] else ""
            size = "" if not self.args.diff else f"{len(new)} bytes, "
            return Planned(
                summary=f"create {self.dest} ({size}mode {final:04o}{made})",
                changes=[FileChange(self.dest, b"", new, self._shown(b"", new))],
                data=data,
            )
        info = state.stat
        said = []
        if new != state.content:
            said.append("content")
        if mode is not None and mode != info.permissions:
            said.append(f"mode {info.permissions:04o} -> {mode:04o}")
        if uid is not None and uid != info.uid and not state.created:
            said.append(f"owner {info.uid} -> {uid}")
        if gid is not None and gid != info.gid and not state.created:
            said.append(f"group {info.gid} -> {gid}")
        if not said:
            return Planned(summary="no change: content, mode and owner as wanted", noop=True)
        change = FileChange(self.dest, state.content, new, self._shown(state.content, new))
        return Planned(summary="changes " + ", ".join(said), changes=[change], data=data)

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        if planned.noop:
            return
        new = self.content()
        if self.args.validate_ is not None and not ctx.check_mode:
            self._validate(ctx, new)
        data = planned.data
        options: dict[str, Any] = {
            "unsafe_dir": self.args.unsafe_dir,
            "hardlinks": self.args.hardlinks,
            "mode": data["mode"],
            "uid": data["uid"],
            "gid": data["gid"],
        }
        if "dirs" in data:
            create_file(ctx, self.dest, new, dirs=data["dirs"], **options)
        else:
            write_file(ctx, self.dest, new, **options)

    def _validate(self, ctx: StepContext, content: bytes) -> None:
        """Run ``validate`` on a private copy of ``content``; raise if it fails.

        One command in the lock's shell: ``mktemp`` makes the copy (O_EXCL, mode 0600) in
        ``state_dir``, which only root or the login user can write in; the bytes come on
        stdin, never on a command line; the command gets the copy's path as ``"$1"`` (the
        ``%s``), so no path is pasted into shell text; the copy is removed when it ends.
        Nothing is journaled or written before it passes: a refused file is a run that
        failed with nothing to undo.

        Raises:
            StepFailed: the command exited other than 0 or timed out (nothing was written).
        """
        from deploy.remote.host import quote
        from deploy.statedir.layout import Layout

        command = str(self.args.validate_) % ('"$1"',)
        seconds = VALIDATE_TIMEOUT
        script = (
            f"_dv=$(mktemp {quote(Layout(ctx.state_dir).validate_template)}) || exit 125\n"
            "trap 'rm -f -- \"$_dv\"' EXIT\n"
            'cat > "$_dv" || exit 125\n'
            f'cd / && timeout -k 5 {seconds} sh -c {quote(command)} validate "$_dv"'
        )
        result = ctx.remote.run(script, stdin=content, timeout=seconds + 10)
        if result.ok:
            return
        if result.exit_status == 124 or result.timed_out:
            why = f"timed out after {seconds} s"
        elif result.exit_status == 125:
            why = "could not be given its copy of the file (mktemp or cat failed)"
        else:
            why = f"exited {result.exit_status}"
        output = (
            "output not shown (diff: false)"
            if not self.args.diff
            else result.tail(3) or "no output"
        )
        raise StepFailed(
            f"validate `{self.args.validate_}` {why}: {output}; {self.dest} was not changed"
        )
