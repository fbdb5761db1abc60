"""What ``apply`` and ``rollback`` share: progress, delivery, the printed result and the exit."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from deploy.cli.common import end_process, show_warnings


def _split(values: tuple[str, ...]) -> set[str] | None:
    items = {part.strip() for value in values for part in value.split(",") if part.strip()}
    return items or None


def _progress(
    as_json: bool, verbose: int, *, color: str = "auto", steps: bool = True, heartbeat: float = 30.0
) -> Any:
    from deploy.engine.host_run import NoProgress
    from deploy.report.human import use_colour
    from deploy.report.progress import ProgressPrinter

    if as_json:
        return NoProgress()
    return ProgressPrinter(
        sys.stderr,
        verbose=verbose,
        colour=use_colour(sys.stderr, color),
        steps=steps,
        heartbeat=heartbeat,
    )


def _finish(
    run: Any,
    *,
    as_json: bool,
    show_diff: bool,
    record: bool,
    out: Any,
    color: str = "auto",
    details: bool = True,
    errors: bool = True,
    verbose: int = 0,
) -> NoReturn:
    """Record and deliver the run, print it (summary or JSON), exit with its code.

    The report, log file and webhook get the whole summary; the terminal leaves out what it
    has already been shown (``details``: the plan; ``errors``: the live progress lines), and
    fits its width; ``verbose`` (``-v``) adds the changed files' paths and the figures.
    """
    from deploy.report.human import render_summary, use_colour
    from deploy.report.text import NO_LIMIT

    plain = render_summary(run, colour=False, diffs=show_diff, verbose=True, width=NO_LIMIT)
    for warning in out.finished(run, record=record, summary=plain):
        click.echo(f"deploy: warning: {warning}", err=True)
    if as_json:
        import json

        click.echo(json.dumps(run.to_dict(), indent=2, sort_keys=True))
    else:
        colour = use_colour(sys.stdout, color)
        text = render_summary(
            run,
            colour=colour,
            diffs=show_diff,
            details=details,
            errors=errors,
            verbose=bool(verbose),
        )
        click.echo(text, color=colour)  # click strips colour off a non-terminal unless told
    if any(host.outcome == "interrupted" for host in run.hosts):
        # Abandoned host threads may still be inside paramiko: exit without joining them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(run.exit_code)
    end_process(run.exit_code)


def _delivery(
    what: str, run_id: str, report: Path | None, log_file: Path | None, url: str | None
) -> Any:
    from deploy.report.delivery import Delivery

    return Delivery.open(
        what, run_id, report=report, log_file=log_file, notify_url=url, argv=sys.argv[1:]
    )


def _logging(verbose: int) -> None:
    """``-v``: the engine's notes and the libraries' warnings (`show_warnings`); ``-vv``: also
    debug records (the commands run on hosts)."""
    import logging

    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger = logging.getLogger("deploy")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
        show_warnings(logging.getLogger("deploy.warnings").warning)
