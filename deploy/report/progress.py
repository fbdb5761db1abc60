"""Live progress of a run: one line as each step ends, per host, and heartbeats while one waits.

Lines, not a redrawn screen: they read the same in a terminal, a pipe, a log and a cron mail.
Each fits the terminal's width (`deploy.report.text`): a step's line is its host, number,
title (shortened at the end if need be), status and time, with its summary beside it when
that fits, below it with ``-v`` or when the step failed, else only in the final report
(``deploy show``, ``--json``). A host's free-text notes (a wait, a drain) are wrapped.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

from deploy.engine.results import StepResult
from deploy.report.human import paint, use_colour
from deploy.report.text import own, shorten_end, terminal_width, wrap

#: A title is shortened to fit a line, but never below this many characters.
_MIN_TITLE = 16


@dataclass
class _Running:
    """A step in progress on one host, as the heartbeat needs it."""

    number: int
    title: str
    started: float
    last_line: float
    note: str = ""


class ProgressPrinter:
    """Prints one line as each step ends (and starts, with ``-v``), per host, thread-safe.

    Lines, not a redrawn screen: they read the same in a terminal, a pipe, a log and a cron
    mail. A step that runs long (a model loading for minutes) gets a "still running" line
    every ``heartbeat`` seconds in which nothing else was said about its host, with the
    newest note the step gave (e.g. the server's latest log line), so a wait never looks
    like a hang.
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        verbose: int = 0,
        heartbeat: float = 30.0,
        colour: bool | None = None,
        steps: bool = True,
        width: int | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        #: Columns to fit each line into (default: the terminal's ``stream`` writes to); None:
        #: no limit (a pipe, a log).
        self.width = width or terminal_width(self.stream)
        self.verbose = verbose
        self.colour = use_colour(self.stream) if colour is None else colour
        self.heartbeat = heartbeat
        #: False for ``--check``: the plan printed at the end shows every step and every host's
        #: error once; live lines would say it all a second time. Only heartbeats remain.
        self.steps = steps
        self._lock = threading.Lock()
        self._began = time.monotonic()
        self._running: dict[str, _Running] = {}
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def _line(self, text: str, host: str | None = None) -> None:
        with self._lock:  # a wrapped message is written in one piece: lines never interleave
            self.stream.write(text + "\n")
            self.stream.flush()
            if host is not None and host in self._running:
                self._running[host].last_line = time.monotonic()

    def host_event(self, host: str, message: str) -> None:
        message = own(host, message)
        running = self._running.get(host)
        if running is not None:
            running.note = message
        if self.steps:
            self._line("\n".join(wrap(message, self.width, f"{host}: ", "    ")), host)

    def run_event(self, message: str) -> None:
        self._line("\n".join(wrap(message, self.width, "", "    ")))

    def _title(self, head: str, title: str, tail: str) -> str:
        """``title`` shortened so that ``head + title + tail`` fits (not below `_MIN_TITLE`)."""
        if self.width is None:
            return title
        return shorten_end(title, max(_MIN_TITLE, self.width - len(head) - len(tail)))

    def busy(self, host: str, title: str) -> None:
        """``host`` works on ``title`` (a rollback) outside any step: keep its heartbeat."""
        now = time.monotonic()
        with self._lock:
            self._running[host] = _Running(0, title, now, now)
            self._start_ticker()

    def idle(self, host: str) -> None:
        with self._lock:
            self._running.pop(host, None)

    def _start_ticker(self) -> None:
        if self._ticker is None and self.heartbeat > 0:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def step_started(self, host: str, index: int, title: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._running[host] = _Running(index + 1, title, now, now)
            self._start_ticker()
        if self.verbose and self.steps:
            head = f"{host}: [{index + 1}] "
            self._line(f"{head}{self._title(head, title, ' ...')} ...", host)

    def step_finished(self, host: str, result: StepResult) -> None:
        with self._lock:
            self._running.pop(host, None)
        if not self.steps:
            return
        head = f"{host}: [{result.index + 1}] "
        tail = f": {result.status} ({result.duration:.2f} s)"
        line = head + self._title(head, result.title, tail) + tail
        summary = own(host, result.summary)  # the line starts with the host already
        lines = [line]
        if summary and (self.width is None or len(line) + 1 + len(summary) <= self.width):
            lines = [f"{line} {summary}"]
        elif summary and (self.verbose or result.status == "failed"):
            lines += wrap(summary, self.width, "    ")
        status = paint(result.status, result.status, self.colour)
        lines[0] = lines[0].replace(tail, f": {status} ({result.duration:.2f} s)", 1)
        self._line("\n".join(lines), host)

    def _tick(self) -> None:
        while not self._stop.wait(min(self.heartbeat, 1.0)):
            now = time.monotonic()
            with self._lock:
                quiet = [
                    (host, step)
                    for host, step in self._running.items()
                    if now - step.last_line >= self.heartbeat
                ]
            for host, step in quiet:
                number = f"[{step.number}] " if step.number else ""
                head = f"{host}: {number}"
                tail = f": still running ({_elapsed(now - step.started)})"
                line = head + self._title(head, step.title, tail) + tail
                # The note was said in full when it happened: here only as much as fits.
                note = f"; latest: {step.note}" if step.note else ""
                if self.width is not None and len(line) + len(note) > self.width:
                    room = self.width - len(line)
                    note = shorten_end(note, room) if room >= len("; latest: ") + 12 else ""
                self._line(line + note, host)

    def close(self) -> None:
        """Stop the heartbeat (it is a daemon thread, so exiting without this is fine too)."""
        self._stop.set()


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
