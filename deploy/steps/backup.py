"""``backup: {path}`` — save a checksummed copy of a file under ``state_dir``.

Every step that changes a file already saves it; an explicit backup is for files the playbook
changes by other means (a command), and makes the intent visible in the plan.
"""

from __future__ import annotations

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.statedir.records import Backup, sha256
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import read_file


class BackupArgs(StrictModel):
    """Save a checksummed copy of ``path`` under ``state_dir`` (never beside the file)."""

    path: str = Field(description="Absolute path of the file on the host.")


@register
class BackupStep(Step[BackupArgs]):
    kind = "backup"
    example = """\
- name: Save the config a command below rewrites
  backup: {path: /etc/sglang/server.env}
"""
    records = (Backup,)
    mutating = False  # it adds a copy under state_dir; the file itself is untouched
    runs_in_check_mode = True  # nothing to verify; shown as planned, not as skipped
    confined = True

    def describe(self) -> str:
        return f"backup {self.args.path}"

    def reads(self) -> list[str]:
        return [self.args.path]

    def plan(self, ctx: StepContext) -> Planned:
        state = read_file(ctx, self.args.path)
        digest = sha256(state.original)
        if self.args.path in ctx.saved:
            return Planned(summary=f"already saved in this run (sha256 {digest[:12]})", noop=True)
        return Planned(
            summary=f"copy of {self.args.path} (sha256 {digest[:12]}, {len(state.original)} bytes) "
            "saved before the first change"
        )

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        """Mark the file to be saved before the run's first change (nothing is written now)."""
        if self.args.path not in ctx.saved and self.args.path not in ctx.pending_backups:
            ctx.pending_backups.append(self.args.path)
