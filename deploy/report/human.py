"""Human renderings of a run: live progress lines, the plan with diffs, the summary table.

Plain text that reads well in a terminal, a log file and a cron mail alike; colour only on a
terminal (``--color auto``), never when ``NO_COLOR`` is set (https://no-color.org) or the
terminal is ``TERM=dumb``. Tables fit the terminal's width (``$COLUMNS``): long cells (paths)
are shortened in the middle, where a path has the least to say; ``--json`` always carries them
in full, and so does output that goes to no terminal.
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
from deploy.report.text import own, table_lines

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


def use_colour(stream: IO[str], choice: str = "auto") -> bool:
    """``--color``: ``always``, ``never``, or ``auto`` (a terminal, no NO_COLOR, not TERM=dumb)."""
    if choice in ("always", "never"):
        return choice == "always"
    return (
        not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
        and hasattr(stream, "isatty")
        and stream.isatty()
    )


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
        self,
        stream: IO[str] | None = None,
        *,
        verbose: int = 0,
        heartbeat: float = 30.0,
        colour: bool | None = None,
        steps: bool = True,
    ) -> None:
        self.stream = stream or sys.stderr
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
        with self._lock:
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
            self._line(f"{host}: {message}", host)

    def run_event(self, message: str) -> None:
        self._line(message)

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
            self._line(f"{host}: [{index + 1}] {title} ...", host)

    def step_finished(self, host: str, result: StepResult) -> None:
        with self._lock:
            self._running.pop(host, None)
        if not self.steps:
            return
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
                number = f"[{step.number}] " if step.number else ""
                self._line(
                    f"{host}: {number}{step.title}: still running "
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
            out.append(f"  {own(host.host, host.error)}")
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
    if run.check_mode or len(run.hosts) <= 1 or (len(groups) <= 1 and not run.batches):
        return []  # a --check changed nothing: its "new state" would be false
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
    run: RunResult,
    *,
    colour: bool = False,
    diffs: bool = False,
    details: bool = True,
    errors: bool = True,
    width: int | None = None,
) -> str:
    """Per-host detail (failures, rollback actions, diffs on request), the fleet, a table.

    ``details=False`` leaves out the per-host part (``--check`` printed it in the plan);
    ``errors=False`` leaves out the errors the live progress lines already said.
    """
    out: list[str] = []
    if run.target_run:
        out += [f"rollback of run {run.target_run} ({run.playbook or 'playbook unknown'})", ""]
    if details:
        for host in run.hosts:
            interesting = (
                (host.error and errors)
                or host.rollback
                or host.recovered
                or (diffs and any(s.diff for s in host.steps))
            )
            if not interesting:
                continue
            out.append(f"{host.host}: {paint(host.outcome, host.outcome, colour)}")
            for line in host.recovered:
                out.append(f"  recovered {line}")
            if host.error and errors:
                out.append(f"  {own(host.host, host.error)}")
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

    def style(column: int, padded: str, raw: str) -> str:
        return paint(padded, raw, colour) if column == 1 else padded

    out.extend(table_lines(headers, rows, shrink=(2, 4), width=width, style=style))
    # A --check run is not recorded (`deploy show` could not find its id): it names none.
    label = "" if run.check_mode else f"run {run.run_id}: "
    out.append(f"{label}exit {run.exit_code} ({verdict(run)}), {run.duration:.2f} s")
    return "\n".join(out)


def verdict(run: RunResult) -> str:
    """What the exit code means for this run; a ``--check`` counts the hosts that would change."""
    code = run.exit_code
    pending = len(run.pending)
    if run.check_mode and code in (0, 5):
        if not pending:
            return "every host is in the desired state; nothing to change"
        return f"{pending} host(s) would change; nothing was changed"
    meaning = _meaning(code, run)
    return f"{meaning}; {pending} host(s) would change" if run.check_mode and pending else meaning


def _meaning(code: int, run: RunResult | None = None) -> str:
    if code == 1 and run is not None and not any(h.outcome == "rolled back" for h in run.hosts):
        # "failed" is a step that failed before anything changed: nothing to roll back.
        return "a step failed; nothing was changed"
    return {
        0: "every host is in the desired state",
        1: "a step failed; affected hosts were rolled back",
        2: "invalid input",
        3: "ROLLBACK FAILED: a human must look",
        4: "some host was not attempted",
        5: "changes are pending",
    }.get(code, "?")


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
                f"{run.command} {run.target_run}" if run.target_run else run.command,
                run.playbook or "-",
                str(run.exit_code),
                f"{run.duration:.1f} s",
                hosts,
            ]
        )
    last = "OUTCOME" if host else "HOSTS"
    headers = ["RUN", "STARTED", "COMMAND", "PLAYBOOK", "EXIT", "TIME", last]
    return "\n".join(table_lines(headers, rows, shrink=(6,)))


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
            notes.append(f"{status.host}: {own(status.host, status.error)}")
        if status.lock in ("held", "stale"):
            notes.append(f"{status.host}: lock {status.describe_lock()}")
        for run in status.unfinished:
            what = (
                f"`deploy rollback {run.run_id}` finishes undoing it (`deploy apply` leaves "
                "this host alone until then)"
                if run.state == "rollback incomplete"
                else "it is not retried: a human brings the host back, then "
                f"`deploy resolve {run.run_id} -m WHY` (apply and rollback refuse until then)"
                if run.state == "undo failed"
                else f"the next `deploy apply` on this host (or `deploy rollback {run.run_id}`) "
                "undoes it first"
            )
            notes.append(
                f"{status.host}: run {run.run_id} ({run.playbook or '?'} by {run.user or '?'}, "
                f"{run.since or '?'}) is {run.state}; {what}"
            )
    headers = ["HOST", "LOCK", "LAST RUN", "OUTCOME", "UNFINISHED", "SERVICE"]
    table = table_lines(headers, rows, shrink=(2, 4, 5))
    return "\n".join([*table, *(["", *notes] if notes else [])])
