"""Human renderings of a run: live progress lines, the plan with diffs, the summary table.

Plain text that reads well in a terminal, a log file and a cron mail alike; colour only on a
terminal and never when ``NO_COLOR`` is set (https://no-color.org).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from deploy.engine.batches import fleet_state
from deploy.engine.results import HostResult, RunResult, StepResult
from deploy.masking import mask

if TYPE_CHECKING:
    from deploy.engine.status import HostStatus

_COLOURS = {
    "changed": "yellow",
    "would change": "yellow",
    "restored": "yellow",
    "unchanged": "green",
    "ok": "green",
    "nothing to do": "green",
    "failed": "red",
    "rolled back": "magenta",
    "rollback failed": "red",
    "not attempted": "red",
    "interrupted": "red",
    "skipped": "bright_black",
    "not run": "bright_black",
}


def use_colour(stream: IO[str]) -> bool:
    return not os.environ.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def paint(text: str, status: str, colour: bool) -> str:
    if not colour or status not in _COLOURS:
        return text
    import click

    return click.style(text, fg=_COLOURS[status], bold=status in ("rollback failed", "failed"))


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
        self, stream: IO[str] | None = None, *, verbose: int = 0, heartbeat: float = 30.0
    ) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self.colour = use_colour(self.stream)
        self.heartbeat = heartbeat
        self._lock = threading.Lock()
        self._began = time.monotonic()
        self._running: dict[str, _Running] = {}
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def _line(self, text: str, host: str | None = None) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()
            if host is not None and host in self._running:
                self._running[host].last_line = time.monotonic()

    def host_event(self, host: str, message: str) -> None:
        running = self._running.get(host)
        if running is not None:
            running.note = message
        self._line(f"{host}: {message}", host)

    def run_event(self, message: str) -> None:
        self._line(message)

    def step_started(self, host: str, index: int, title: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._running[host] = _Running(index + 1, title, now, now)
            if self._ticker is None and self.heartbeat > 0:
                self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
                self._ticker.start()
        if self.verbose:
            self._line(f"{host}: [{index + 1}] {title} ...", host)

    def step_finished(self, host: str, result: StepResult) -> None:
        with self._lock:
            self._running.pop(host, None)
        status = paint(result.status, result.status, self.colour)
        self._line(
            f"{host}: [{result.index + 1}] {result.title}: {status} ({result.duration:.2f} s) {result.summary}".rstrip()
        )

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
                tail = f"; latest: {step.note}" if step.note else ""
                self._line(
                    f"{host}: [{step.number}] {step.title}: still running "
                    f"({_elapsed(now - step.started)}){tail}",
                    host,
                )

    def close(self) -> None:
        """Stop the heartbeat (it is a daemon thread, so exiting without this is fine too)."""
        self._stop.set()


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def render_steps(host: HostResult, *, colour: bool, diffs: bool) -> list[str]:
    lines = []
    for step in host.steps:
        status = paint(f"{step.status:>12}", step.status, colour)
        lines.append(f"  {step.index + 1:>2}. {status}  {step.title}")
        if step.summary and step.status not in ("not run",):
            lines.append(f"                    {step.summary}")
        if diffs and step.diff:
            lines.extend("        " + line for line in mask(step.diff).rstrip("\n").splitlines())
    return lines


def render_plan(run: RunResult, *, colour: bool = False) -> str:
    """The plan as ``--check`` shows it and as ``apply`` shows it before asking."""
    out = [
        f"Plan for {run.playbook or run.command} ({len(run.hosts)} host(s)); nothing has been changed:"
    ]
    for host in run.hosts:
        out.append("")
        out.append(f"{host.host}: {paint(host.outcome, host.outcome, colour)}")
        if host.error:
            out.append(f"  {host.error}")
        out.extend(f"  first: {line}" for line in host.recovered)
        out.extend(render_steps(host, colour=colour, diffs=True))
    return "\n".join(out)


def _figures(host: HostResult) -> str:
    figures: list[str] = []
    for step in host.steps:
        figures.extend(f"{k}={v}" for k, v in step.figures.items())
    return ", ".join(figures)


def render_fleet_state(run: RunResult, *, colour: bool = False) -> list[str]:
    """Where the run left the fleet, when that is not one word: new state, rolled back, ...

    Shown for rolling batches and for any run whose hosts ended in different states, so an
    operator reads at once which hosts run the new code, which were put back and which
    were never touched.
    """
    groups = fleet_state(run)
    if len(run.hosts) <= 1 or (len(groups) <= 1 and not run.batches):
        return []
    out = []
    if run.batches:
        sizes = ", ".join(str(len(batch)) for batch in run.batches)
        out.append(f"Rolling batches: {len(run.batches)} ({sizes} host(s)).")
    if run.stopped:
        out.append(paint(f"Stopped: {run.stopped}.", "failed", colour))
    width = max(len(label) for label in groups) + 1
    for label, names in groups.items():
        out.append(f"  {(label + ':').ljust(width)}  {', '.join(names)}")
    return [*out, ""]


def render_summary(
    run: RunResult, *, colour: bool = False, diffs: bool = False, details: bool = True
) -> str:
    """Per-host detail (failures, rollback actions, diffs on request), the fleet, a table."""
    out: list[str] = []
    if details:
        for host in run.hosts:
            interesting = (
                host.error
                or host.rollback
                or host.recovered
                or (diffs and any(s.diff for s in host.steps))
            )
            if not interesting:
                continue
            out.append(f"{host.host}: {paint(host.outcome, host.outcome, colour)}")
            for line in host.recovered:
                out.append(f"  recovered {line}")
            if host.error:
                out.append(f"  {host.error}")
            for line in host.rollback:
                out.append(f"  undo: {line}")
            if diffs:
                for step in host.steps:
                    if step.diff:
                        out.extend(
                            "    " + line for line in mask(step.diff).rstrip("\n").splitlines()
                        )
            out.append("")
    out.extend(render_fleet_state(run, colour=colour))
    headers = ["HOST", "OUTCOME", "CHANGED FILES", "TIME", "FIGURES"]
    rows = [
        [
            h.host,
            h.outcome,
            ", ".join(h.changed_files) or "-",
            f"{h.duration:.2f} s",
            _figures(h) or "-",
        ]
        for h in run.hosts
    ]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    out.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        cells[1] = paint(cells[1], row[1], colour)
        out.append("  ".join(cells).rstrip())
    out.append(
        f"run {run.run_id}: exit {run.exit_code} ({_meaning(run.exit_code)}), {run.duration:.2f} s"
    )
    return "\n".join(out)


def _meaning(code: int) -> str:
    return {
        0: "every host is in the desired state",
        1: "a step failed; affected hosts were rolled back",
        2: "invalid input",
        3: "ROLLBACK FAILED: a human must look",
        4: "some host was not attempted",
    }.get(code, "?")


def _table_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def render_history(runs: list[RunResult], host: str | None = None) -> str:
    """One line per run, oldest first; with ``host``, that host's outcome in each run."""
    if not runs:
        return f"no runs recorded for {host}" if host else "no runs recorded yet"
    rows = []
    for run in runs:
        if host is not None:
            outcome = next((h.outcome for h in run.hosts if h.host == host), "-")
            hosts = outcome
        else:
            hosts = ", ".join(f"{h.host}={h.outcome}" for h in run.hosts)
        rows.append(
            [
                run.run_id,
                run.started.replace("+00:00", "Z"),
                run.command,
                run.playbook or "-",
                str(run.exit_code),
                f"{run.duration:.1f} s",
                hosts,
            ]
        )
    last = "OUTCOME" if host else "HOSTS"
    headers = ["RUN", "STARTED", "COMMAND", "PLAYBOOK", "EXIT", "TIME", last]
    return "\n".join(_table_lines(headers, rows))


def render_status(statuses: list[HostStatus]) -> str:
    """``deploy status``: one row per host, then the details that need words."""
    rows = []
    notes = []
    for status in statuses:
        last = status.last_run
        unfinished = ", ".join(r.run_id for r in status.unfinished) or "-"
        rows.append(
            [
                status.host,
                "UNREACHABLE" if not status.reachable else status.lock,
                f"{last.run_id} ({last.playbook or '?'})" if last else "-",
                last.state if last else "-",
                unfinished,
                status.health,
            ]
        )
        if status.error:
            prefix = "" if status.error.startswith(f"{status.host}:") else f"{status.host}: "
            notes.append(prefix + status.error)
        if status.lock in ("held", "stale"):
            notes.append(f"{status.host}: lock {status.describe_lock()}")
        for run in status.unfinished:
            notes.append(
                f"{status.host}: run {run.run_id} ({run.playbook or '?'} by {run.user or '?'}, "
                f"{run.since or '?'}) is {run.state}; the next `deploy apply` or "
                "`deploy rollback` on this host undoes it first"
            )
    headers = ["HOST", "LOCK", "LAST RUN", "OUTCOME", "UNFINISHED", "SERVICE"]
    return "\n".join([*_table_lines(headers, rows), *(["", *notes] if notes else [])])
