"""Human renderings of a run: live progress lines, the plan with diffs, the summary table.

Plain text that reads well in a terminal, a log file and a cron mail alike; colour only on a
terminal and never when ``NO_COLOR`` is set (https://no-color.org).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO

from deploy.engine.results import HostResult, RunResult, StepResult

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


class ProgressPrinter:
    """Prints one line as each step starts and ends, per host, safe from several threads."""

    def __init__(self, stream: IO[str] | None = None, *, verbose: int = 0) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self.colour = use_colour(self.stream)
        self._lock = threading.Lock()
        self._began = time.monotonic()

    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def host_event(self, host: str, message: str) -> None:
        self._line(f"{host}: {message}")

    def step_started(self, host: str, index: int, title: str) -> None:
        if self.verbose:
            self._line(f"{host}: [{index + 1}] {title} ...")

    def step_finished(self, host: str, result: StepResult) -> None:
        status = paint(result.status, result.status, self.colour)
        self._line(
            f"{host}: [{result.index + 1}] {result.title}: {status} ({result.duration:.2f} s) {result.summary}".rstrip()
        )


def render_steps(host: HostResult, *, colour: bool, diffs: bool) -> list[str]:
    lines = []
    for step in host.steps:
        status = paint(f"{step.status:>12}", step.status, colour)
        lines.append(f"  {step.index + 1:>2}. {status}  {step.title}")
        if step.summary and step.status not in ("not run",):
            lines.append(f"                    {step.summary}")
        if diffs and step.diff:
            lines.extend("        " + line for line in step.diff.rstrip("\n").splitlines())
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
        out.extend(render_steps(host, colour=colour, diffs=True))
    return "\n".join(out)


def _figures(host: HostResult) -> str:
    figures = []
    for step in host.steps:
        figures.extend(f"{k}={v}" for k, v in step.figures.items())
    return ", ".join(figures)


def render_summary(
    run: RunResult, *, colour: bool = False, diffs: bool = False, details: bool = True
) -> str:
    """Per-host detail (failures, rollback actions, diffs on request), then one table."""
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
                        out.extend("    " + line for line in step.diff.rstrip("\n").splitlines())
            out.append("")
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


def render_history(runs: list[RunResult]) -> str:
    if not runs:
        return "no runs recorded yet"
    lines = [f"{'RUN':<24}  {'STARTED':<25}  {'COMMAND':<9}  {'PLAYBOOK':<26}  EXIT  HOSTS"]
    for run in runs:
        hosts = ", ".join(f"{h.host}={h.outcome}" for h in run.hosts)
        lines.append(
            f"{run.run_id:<24}  {run.started:<25}  {run.command:<9}  {(run.playbook or '-'):<26}  {run.exit_code:<4}  {hosts}"
        )
    return "\n".join(lines)
