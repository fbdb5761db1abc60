"""Within one step: a file read, then a command, then a write of that file.

The one step that does this for real is ``restart`` under systemd: its plan reads deploy's
drop-in (`deploy.steps.service_systemd.plan_dropin`), and before its act writes it
(`write_dropin`) it runs commands (``systemctl cat``/``show``, the import check, the "before
the first change" phase). The engine marks files stale (`StepContext.files_may_change`) only
between steps, so such a file is not stale at its write. That changes one thing only: the
saved copy is made on the host from the file itself rather than sent (`save_original`). The
write is a compare-and-swap against the bytes the step read (``expect_sha256``) whatever
``stale`` says, so:

- a command that leaves the file alone does not make the write fail;
- a command that rewrote the file makes the write be refused — rightly: the new bytes were
  computed from the old ones — and marking the file stale after the command would refuse it
  just the same; the command's bytes stay, and the run's saved copy holds the original.

A throwaway step (registered for these tests only) plays that sequence on a `LocalHost`,
through the real engine, lock, session and file helper.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.remote.host import quote
from deploy.steps import register, unregister
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import FileUndo, read_file, write_file
from tests.unit.local_rig import LocalRig

ORIGINAL = b"[Service]\nExecStart=\nExecStart=/usr/bin/python3 -m server\n"
NEW = ORIGINAL + b'Environment="SGLANG_DEBUG=0"\n'
BY_THE_COMMAND = ORIGINAL + b"# written by the step's own command\n"


class RewriteArgs(StrictModel):
    """Read a file, run a command, then write the file (a test's throwaway step)."""

    path: str = Field(description="The file.")
    command: str = Field(description="Run between the read and the write.")
    mark_stale: bool = Field(default=False, description="Mark files stale after the command.")


class RewriteStep(Step[RewriteArgs]):
    kind = "rewrite_after_command"
    example = """\
- rewrite_after_command: {path: /etc/app.conf, command: "true"}
"""
    mutating = True  # and not confined: it runs a command, as a service step does

    @classmethod
    def undo_handler(cls) -> type[FileUndo]:
        return FileUndo

    def plan(self, ctx: StepContext) -> Planned:
        read_file(ctx, self.args.path)  # as the restart's plan reads its drop-in
        return Planned(summary=f"rewrite {self.args.path}")

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        if ctx.check_mode:
            return
        ctx.remote.run(self.args.command, timeout=30, check=True)
        if self.args.mark_stale:
            ctx.files_may_change()
        write_file(ctx, self.args.path, NEW)
        ctx.remote.flush()  # the write's answer, here rather than at the commit


@pytest.fixture
def rewrite() -> Iterator[None]:
    register(RewriteStep)
    try:
        yield
    finally:
        unregister(RewriteStep.kind)


@pytest.fixture
def rig(tmp_path: Path) -> LocalRig:
    rig = LocalRig(tmp_path / "host")
    (rig.files / "50-deploy.conf").write_bytes(ORIGINAL)
    return rig


def _apply(rig: LocalRig, command: str, *, mark_stale: bool = False) -> tuple[int, str]:
    path = rig.files / "50-deploy.conf"
    args = {"path": str(path), "command": command, "mark_stale": mark_stale}
    result = rig.apply(rig.playbook("pb", [{RewriteStep.kind: args}]))
    return result.exit_code, result.hosts[0].error or ""


def test_a_command_that_leaves_the_file_alone_does_not_fail_the_write(
    rig: LocalRig, rewrite: None
) -> None:
    path = rig.files / "50-deploy.conf"
    code, error = _apply(rig, f"cat -- {quote(str(path))} > /dev/null")
    assert code == 0, error
    assert path.read_bytes() == NEW
    (run_id,) = rig.runs()
    saved = rig.state_dir / "runs" / run_id / "files" / hashlib.sha256(ORIGINAL).hexdigest()
    assert saved.read_bytes() == ORIGINAL


@pytest.mark.parametrize("mark_stale", [False, True], ids=["as-the-engine-does", "stale"])
def test_a_command_that_rewrote_the_file_has_the_write_refused_stale_or_not(
    rig: LocalRig, rewrite: None, mark_stale: bool
) -> None:
    path = rig.files / "50-deploy.conf"
    command = f"printf %s {quote(BY_THE_COMMAND.decode())} > {quote(str(path))}"
    code, error = _apply(rig, command, mark_stale=mark_stale)
    assert code == 1, error
    assert error.endswith(
        "50-deploy.conf changed on the host while we were editing it; not written"
    )
    assert path.read_bytes() == BY_THE_COMMAND, "the command's bytes are not overwritten"
    (run_id,) = rig.runs()
    saved = rig.state_dir / "runs" / run_id / "files" / hashlib.sha256(ORIGINAL).hexdigest()
    assert saved.read_bytes() == ORIGINAL, "the original the run read is kept"
