"""Where a finished run's report goes besides the terminal: history, ``--report``, the log,
the webhook.

These are what make a run unattended-safe, and each is best effort in the same way: a
history directory that cannot be written, a full disk for ``--report`` or a dead webhook is
a warning, never a different exit code — the exit code says what happened on the hosts, and
nothing that happens on the workstation afterwards may change it. The warnings are returned
for the CLI to print, and go to the log file too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from deploy.engine import history
from deploy.engine.results import RunResult
from deploy.masking import mask_argv
from deploy.report.logfile import LogFile
from deploy.report.notify import notify_failure

log = logging.getLogger("deploy.report")


@dataclass
class Delivery:
    """The unattended outputs of one command (``what``, e.g. "apply kimi-eagle3")."""

    what: str
    report: Path | None = None
    log_file: LogFile | None = None
    notify_url: str | None = None
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        what: str,
        run_id: str,
        *,
        report: Path | None,
        log_file: Path | None,
        notify_url: str | None,
        argv: list[str],
    ) -> Delivery:
        """Start the log (if asked) with the command line; nothing else happens yet."""
        opened = LogFile(log_file, run_id) if log_file is not None else None
        if opened is not None:
            opened.capture()
            opened.line(f"start: deploy {' '.join(mask_argv(argv))}")
        return cls(what, report, opened, notify_url)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.log_file is not None:
            self.log_file.line(f"warning: {message}")

    def failed_early(self, error: str, exit_code: int) -> list[str]:
        """The command stopped before any run (bad input, the job already running)."""
        if self.log_file is not None:
            self.log_file.line(f"error: {error}")
            self.log_file.line(f"exit {exit_code}")
        problem = notify_failure(self.notify_url, None, exit_code, what=self.what, error=error)
        if problem:
            self._warn(f"could not notify: {problem}")
        self.close()
        return self.warnings

    def finished(self, run: RunResult, *, record: bool, summary: str) -> list[str]:
        """Record, write, log and notify a finished run; return the warnings."""
        if record:
            try:
                history.save(run)
            except OSError as exc:
                self._warn(f"could not record the run in history: {exc}")
        if self.report is not None:
            try:
                history.write_json_atomic(self.report, run.to_dict())
            except OSError as exc:
                self._warn(f"could not write the report to {self.report}: {exc}")
        if self.log_file is not None:
            self.log_file.line(summary)
        problem = notify_failure(self.notify_url, run, run.exit_code, what=self.what)
        if problem:
            self._warn(f"could not notify: {problem}")
        if self.log_file is not None:
            self.log_file.line(f"exit {run.exit_code}")
        self.close()
        return self.warnings

    def close(self) -> None:
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None
