"""``--log-file FILE``: a plain, timestamped log of a run, appended to.

For scheduled runs, where stdout carries the JSON report and nobody reads stderr: one file
that accumulates every run's progress lines, warnings, the summary table and the exit code,
greppable by run id. Each line is ``<UTC time> <run-id> <text>``; no colour, ever. It is a
progress listener (the engine calls it from the host threads, hence the lock) and a logging
handler for the ``deploy`` loggers, so what ``-v``/``-vv`` show also lands here.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from deploy.engine.results import StepResult
from deploy.masking import mask


class LogFile:
    """An open log file for one run; `close` it (or use ``with``) at the end."""

    def __init__(self, path: Path, run_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        self._handle: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._handler: logging.Handler | None = None
        self._logger = "deploy"

    def line(self, text: str) -> None:
        text = mask(text)  # the one door to the file: nothing written here escapes masking
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
        with self._lock:
            if self._handle is None:
                return
            for part in text.splitlines() or [""]:
                self._handle.write(f"{stamp} {self.run_id} {part}\n")
            self._handle.flush()

    # -- progress listener --------------------------------------------------------------------

    def host_event(self, host: str, message: str) -> None:
        self.line(f"{host}: {message}")

    def step_started(self, host: str, index: int, title: str) -> None:
        self.line(f"{host}: [{index + 1}] {title} ...")

    def step_finished(self, host: str, result: StepResult) -> None:
        self.line(
            f"{host}: [{result.index + 1}] {result.title}: {result.status} "
            f"({result.duration:.2f} s) {result.summary}".rstrip()
        )

    def run_event(self, message: str) -> None:
        self.line(message)

    # -- logging ------------------------------------------------------------------------------

    def capture(self, logger: str = "deploy", level: int = logging.INFO) -> None:
        """Copy records of ``logger`` (and its children) at ``level`` or above into the file."""
        log_file = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                log_file.line(f"{record.levelname.lower()}: {self.format(record)}")

        self._handler = _Handler(level)
        self._logger = logger
        target = logging.getLogger(logger)
        target.addHandler(self._handler)
        if target.getEffectiveLevel() > level:
            target.setLevel(level)

    def close(self) -> None:
        if self._handler is not None:
            logging.getLogger(self._logger).removeHandler(self._handler)
            self._handler = None
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
