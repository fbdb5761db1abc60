"""Human renderings of a run: live progress lines, the plan with diffs, the summary table.

Plain text that reads well in a terminal, a log file and a cron mail alike; colour only on a
terminal (``--color auto``), never when ``NO_COLOR`` is set (https://no-color.org) or the
terminal is ``TERM=dumb``. Every line fits the terminal's width (``$COLUMNS``; the layout
rules are in `deploy.report.text`): a step's line is its host, number, title, status and time,
and its summary only when it fits beside them (``-v``: on the lines below; a failed step's
always); the summary's table names each changed file by its base name and gives a gate's
figures per concurrency level under its host's row. Full paths and every figure are in
``-v``, ``deploy show`` and ``--json``, and in output that goes to no terminal. Diffs are
shown as they are.
"""

from __future__ import annotations

import os
import re
from typing import IO, Any, Literal

from deploy.engine.batches import fleet_state
from deploy.engine.results import HostResult, RunResult, StepResult
from deploy.masking import mask
from deploy.report.text import (
    own,
    shorten_end,
    table_lines,
    terminal_width,
    wrap,
    wrap_items,
)

#: A title is shortened to fit a line, but never below this many characters.
_MIN_TITLE = 16

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


def render_steps(
    host: HostResult, *, colour: bool, diffs: bool, width: int | None = None
) -> list[str]:
    lines = []
    for step in host.steps:
        status = paint(f"{step.status:>12}", step.status, colour)
        head = f"  {step.index + 1:>2}. {step.status:>12}  "
        title = (
            step.title
            if width is None
            else shorten_end(step.title, max(_MIN_TITLE, width - len(head)))
        )
        lines.append(f"  {step.index + 1:>2}. {status}  {title}")
        if step.summary and step.status not in ("not run",):
            lines.extend(wrap(own(host.host, step.summary), width, " " * 20))
        if diffs and step.diff:  # as it is: a diff cut or wrapped would not read as one
            lines.extend("        " + line for line in mask(step.diff).rstrip("\n").splitlines())
    return lines


def render_plan(run: RunResult, *, colour: bool = False, width: int | None = None) -> str:
    """The plan as ``--check`` shows it and as ``apply`` shows it before asking.

    A host's error is left out when it only says why a step listed below failed (a preflight's
    refusal: ``step 5 failed: <the step's summary>``): the step's line says it, once.
    """
    width = width or terminal_width()
    out = wrap(
        f"Plan for {run.playbook or run.command} ({len(run.hosts)} host(s)); "
        "nothing has been changed:",
        width,
    )
    for host in run.hosts:
        out.append("")
        out.append(f"{host.host}: {paint(host.outcome, host.outcome, colour)}")
        if host.error and not _said_by_a_step(host):
            out.extend(wrap(own(host.host, host.error), width, "  "))
        for line in host.recovered:
            out.extend(wrap(line, width, "  first: "))
        out.extend(render_steps(host, colour=colour, diffs=True, width=width))
    return "\n".join(out)


def _said_by_a_step(host: HostResult) -> bool:
    """Whether ``host.error`` is no more than a failed step's summary (`render_steps` shows it),
    as `deploy.engine.step_fail.fail` words it or as a refused host has it."""
    error = own(host.host, host.error or "")
    for step in host.steps:
        said = own(host.host, step.summary)
        if (
            step.status == "failed"
            and said
            and error in (said, f"step {step.index + 1} failed: {said}")
        ):
            return True
    return False


def figures(step: StepResult) -> dict[str, Any]:
    """A step's figures without repeats: ``tokens_per_s`` is left out beside an equal
    ``tokens_per_s_c1`` (the gate gives concurrency 1's figures both names)."""
    return {
        key: value
        for key, value in step.figures.items()
        if not (f"{key}_c1" in step.figures and step.figures[f"{key}_c1"] == value)
    }


_LEVEL = re.compile(r"tokens_per_s_c(\d+)")


def gate_headline(step: StepResult) -> str | None:
    """A gate's figures per concurrency level: ``c1 95.5 tok/s (x1.77 of 53.9) ttft 41 ms
    accept 2.31, c32 ...`` (decode tok/s, its ratio to before, time to first token, EAGLE-3's
    acceptance length; the rest is in ``-v``).

    What the operator waited minutes for; None for a step that measured no level.
    """
    levels = sorted(int(m.group(1)) for k in step.figures if (m := _LEVEL.fullmatch(k)))
    parts = []
    for c in levels:
        part = f"c{c} {step.figures[f'tokens_per_s_c{c}']:.1f} tok/s"
        before = step.figures.get(f"before_tokens_per_s_c{c}")
        ratio = step.figures.get(f"ratio_c{c}")
        if before is not None and ratio is not None:
            part += f" (x{ratio:.2f} of {before:.1f})"
        ttft = step.figures.get(f"ttft_s_c{c}")
        if ttft is not None:
            part += f" ttft {ttft * 1000:.0f} ms"
        accept = step.figures.get(f"accept_length_c{c}")
        if accept is not None:
            part += f" accept {accept:.2f}"
        parts.append(part)
    return ", ".join(parts) or None


def _files_cell(host: HostResult) -> str:
    """The changed files by base name (``kimi_k25.py``, ``app.conf +2``): paths are in -v."""
    if not host.changed_files:
        return "-"
    first = host.changed_files[0].rstrip("/").rsplit("/", 1)[-1]
    more = len(host.changed_files) - 1
    return f"{first} +{more}" if more else first


def render_fleet_state(
    run: RunResult, *, colour: bool = False, width: int | None = None
) -> list[str]:
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
        out.extend(
            paint(line, "failed", colour) for line in wrap(f"Stopped: {run.stopped}.", width)
        )
    label_width = max(len(label) for label in groups) + 1
    for label, names in groups.items():
        out.extend(wrap_items(names, width, f"  {(label + ':').ljust(label_width)}  "))
    return [*out, ""]


def _host_details(
    host: HostResult, *, colour: bool, diffs: bool, errors: bool, verbose: bool, width: int | None
) -> list[str]:
    """A host's lines above the table: recovery, its error, undo actions; with ``verbose``
    its changed files' paths and figures; with ``diffs`` its diffs. Empty when none apply."""
    shown = {k: v for s in host.steps for k, v in figures(s).items()} if verbose else {}
    interesting = (
        (host.error and errors)
        or host.rollback
        or host.recovered
        or (diffs and any(s.diff for s in host.steps))
        or (verbose and (host.changed_files or shown))
    )
    if not interesting:
        return []
    out = [f"{host.host}: {paint(host.outcome, host.outcome, colour)}"]
    # Paths in what was done are shortened (-v and show: whole); an error is never cut.
    words: Literal["keep", "shorten"] = "keep" if verbose else "shorten"
    for line in host.recovered:
        out.extend(wrap(line, width, "  recovered ", "    ", long_words=words))
    if host.error and errors:
        out.extend(wrap(own(host.host, host.error), width, "  ", "    "))
    for line in host.rollback:
        out.extend(wrap(line, width, "  undo: ", "    ", long_words=words))
    if verbose:
        for path in host.changed_files:
            out.append(f"  changed {path}")  # a path is one word: whole, however wide
        if shown:
            items = [f"{k}={v}" for k, v in shown.items()]
            out.extend(wrap_items(items, width, "  figures: ", "    "))
    if diffs:
        for step in host.steps:
            if step.diff:
                out.extend("    " + line for line in mask(step.diff).rstrip("\n").splitlines())
    return [*out, ""]


def render_summary(
    run: RunResult,
    *,
    colour: bool = False,
    diffs: bool = False,
    details: bool = True,
    errors: bool = True,
    verbose: bool = False,
    width: int | None = None,
) -> str:
    """Per-host detail (failures, rollback actions, diffs on request), the fleet, a table.

    ``details=False`` leaves out the per-host part (``--check`` printed it in the plan);
    ``errors=False`` leaves out the errors the live progress lines already said;
    ``verbose`` adds each host's changed files in full and its figures (``-v``, ``show``).
    A gate's figures per level stay under its host's row whatever the options.
    """
    width = width or terminal_width()
    out: list[str] = []
    if run.target_run:
        head = f"rollback of run {run.target_run} ({run.playbook or 'playbook unknown'})"
        out += [*wrap(head, width), ""]
    if details:
        for host in run.hosts:
            out += _host_details(
                host, colour=colour, diffs=diffs, errors=errors, verbose=verbose, width=width
            )
    out.extend(render_fleet_state(run, colour=colour, width=width))
    headers = ["HOST", "OUTCOME", "CHANGED", "TIME"]
    rows = [[h.host, h.outcome, _files_cell(h), f"{h.duration:.2f} s"] for h in run.hosts]

    def style(column: int, padded: str, raw: str) -> str:
        return paint(padded, raw, colour) if column == 1 else padded

    table = table_lines(headers, rows, shrink=(2,), width=width, style=style)
    out.append(table[0])
    for host, line in zip(run.hosts, table[1:], strict=True):
        out.append(line)
        for step in host.steps:
            headline = gate_headline(step)
            if headline:
                label = "gate failed" if step.status == "failed" else "gate"
                out.extend(wrap(headline, width, f"  {label}: ", "    "))
    # A --check run is not recorded (`deploy show` could not find its id): it names none.
    label = "" if run.check_mode else f"run {run.run_id}: "
    tail = f"{label}exit {run.exit_code} ({verdict(run)}), {run.duration:.2f} s"
    out.extend(wrap(tail, width, "", "  "))
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
