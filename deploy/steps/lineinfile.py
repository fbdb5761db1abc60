"""``lineinfile`` — make one line present (replacing what a regexp matches) or absent.

Ansible's ``lineinfile`` semantics: with ``regexp``, the *last* matching line is replaced by
``line``; with no match, a line already equal to ``line`` anywhere is no change, else ``line``
goes after the last line ``insertafter`` matches (``EOF``, the default: at the end) or before
the last line ``insertbefore`` matches (``BOF``: at the start); an anchor that matches nothing
puts it at the end. ``backrefs`` expands ``\\1`` / ``\\g<name>`` from the match and, with no
match, changes nothing. ``absent`` removes every line the regexp matches (or, without one,
every line equal to ``line``); on a missing file it is no change. ``create: true`` makes a
missing file (``present`` only; mode 0644, in an existing directory unless ``create_dirs``);
undo removes a file the step created.

Where it differs from Ansible, on purpose: an added line takes the file's own line ending
(a CRLF file stays CRLF; Ansible writes ``\\n``); a line that is already right is no change
even as a last line without a final newline (Ansible adds the newline, so it reports a change
on every run of such a file), and a line inserted after a last line without a newline goes on
its own line (Ansible glues it onto that line); regexps see each line without its ending, so ``value$`` also
matches in a CRLF file; ``line`` must be one line (Ansible writes a multi-line ``line`` and never
finds it again: a block is ``append``'s job); bytes that are not UTF-8 pass through untouched;
``firstmatch`` and ``search_string`` are not offered.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from deploy.config.template import is_template
from deploy.edits.lineinfile import LineSpec, line_in_file
from deploy.edits.text import unified_diff
from deploy.statedir.records import Backup, Done, Record, WriteIntent
from deploy.steps import register
from deploy.steps.base import FileChange, Planned, RecordUndo, StepContext
from deploy.steps.create import (
    CreateIntent,
    CreateUndo,
    DirUndo,
    MkdirIntent,
    create_file,
    missing_dirs,
    read_optional,
)
from deploy.steps.files import EditStep, FileUndo, FileWriteOptions


class LineInFileArgs(FileWriteOptions):
    """Ensure a line is present (or absent) in a file, like Ansible's lineinfile."""

    path: str = Field(description="Absolute path of the file on the host.")
    regexp: str | None = Field(
        default=None,
        description="Python regular expression searched in each line (without its ending). "
        "present: the last matching line is replaced; absent: every matching line is removed.",
    )
    line: str | None = Field(
        default=None, description="The line (one line; required for state: present)."
    )
    state: Literal["present", "absent"] = Field(default="present", description="present or absent.")
    insertafter: str | None = Field(
        default=None,
        description="Where a line the regexp does not find goes: after the last line this "
        "regexp matches, or EOF (the default) / BOF.",
    )
    insertbefore: str | None = Field(
        default=None, description="Before the last line this regexp matches, or BOF."
    )
    backrefs: bool = Field(
        default=False,
        description="Expand \\1 / \\g<name> in line from the regexp's match; no match: no change.",
    )
    create: bool = Field(
        default=False, description="Create the file when it is missing (state: present)."
    )
    create_dirs: bool = Field(
        default=False, description="With create: also create missing directories (mode 0755)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> LineInFileArgs:
        if self.line is not None and ("\n" in self.line or "\r" in self.line):
            raise ValueError("line must be a single line (use append for a block)")
        if self.state == "present" and self.line is None:
            raise ValueError("state: present needs 'line'")
        if self.state == "absent" and self.line is None and self.regexp is None:
            raise ValueError("state: absent needs 'regexp' or 'line'")
        if self.insertafter is not None and self.insertbefore is not None:
            raise ValueError("give at most one of 'insertafter' or 'insertbefore'")
        if self.backrefs and self.regexp is None:
            raise ValueError("backrefs needs 'regexp'")
        if self.insertbefore == "EOF":
            raise ValueError("insertbefore takes a regexp or BOF (EOF is insertafter's)")
        return self

    @field_validator("regexp", "insertafter", "insertbefore")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None and value not in ("EOF", "BOF") and not is_template(value):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value


@register
class LineInFileStep(EditStep[LineInFileArgs]):
    kind = "lineinfile"
    example = """\
- name: Give the server more KV cache
  lineinfile:
    path: /etc/sglang/server.env
    regexp: '^SGLANG_MEM_FRACTION='
    line: SGLANG_MEM_FRACTION=0.88
    create: true          # a missing file is created (mode 0644)
- name: No debug logging
  lineinfile: {path: /etc/sglang/server.env, regexp: '^SGLANG_DEBUG=', state: absent}
"""
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

    def reads(self) -> list[str]:
        if not self.args.create:
            return [self.path]
        # The directory too: for a file to create, whether it exists is read with the lock.
        return [self.path, self.path.rpartition("/")[0] or "/"]

    def spec(self) -> LineSpec:
        args = self.args
        return LineSpec(
            line=args.line,
            regexp=args.regexp,
            state=args.state,
            insertafter=args.insertafter,
            insertbefore=args.insertbefore,
            backrefs=args.backrefs,
        )

    def edit(self, content: bytes) -> tuple[bytes, str]:
        result = line_in_file(content, self.spec())
        return result.content, result.summary

    def plan(self, ctx: StepContext) -> Planned:
        if read_optional(ctx, self.path) is not None:
            return super().plan(ctx)
        if self.args.state == "absent":
            return Planned(summary=f"no change: {self.path} does not exist", noop=True)
        if not self.args.create:
            from deploy.errors import StepFailed

            raise StepFailed(
                f"{ctx.host}: {self.path} does not exist (create: true makes it); "
                "nothing was changed"
            )
        dirs = missing_dirs(ctx, self.path, create_dirs=self.args.create_dirs)
        new, _ = self.edit(b"")
        diff = unified_diff(b"", new, self.path)
        return Planned(
            summary=f"create {self.path} with the line",
            changes=[FileChange(self.path, b"", new, diff)],
            data={"dirs": dirs},
        )

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        if "dirs" not in planned.data:
            super().apply(ctx, planned)
            return
        for change in planned.changes:
            create_file(
                ctx,
                change.path,
                change.after,
                dirs=planned.data["dirs"],
                unsafe_dir=self.args.unsafe_dir,
                hardlinks=self.args.hardlinks,
            )
