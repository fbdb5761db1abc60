"""``backup: {path}`` — save a checksummed copy of a file under ``state_dir``.

Every step that changes a file already saves it; an explicit backup is for files the playbook
changes by other means (a command), and makes the intent visible in the plan.
"""

from __future__ import annotations

from deploy.config.steps import BackupArgs
from deploy.remote.host import sha256
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import read_file


class BackupStep(Step):
    kind = "backup"
    mutating = False  # it adds a copy under state_dir; the file itself is untouched
    runs_in_check_mode = True  # nothing to verify; shown as planned, not as skipped

    def describe(self) -> str:
        assert isinstance(self.args, BackupArgs)
        return f"backup {self.args.path}"

    def plan(self, ctx: StepContext) -> Planned:
        assert isinstance(self.args, BackupArgs)
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
        assert isinstance(self.args, BackupArgs)
        if self.args.path not in ctx.saved and self.args.path not in ctx.pending_backups:
            ctx.pending_backups.append(self.args.path)
