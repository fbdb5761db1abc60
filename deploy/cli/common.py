"""What the ``deploy`` commands share: context settings, common options, input paths, errors."""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import click

from deploy.errors import DeployError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def startup_done() -> None:
    """Imports and input checks are over: collect garbage normally from here on.

    `deploy.cli.main` turns the cyclic garbage collector off while a command imports its
    modules and validates its input: those build hundreds of thousands of long-lived objects
    (pydantic schemas, the SSH stack), and the collections they trigger — over objects that
    will never be garbage — cost ~15-30 ms of a ~0.5 s run, plus ~13 ms more for the first
    collection in the run itself. Commands that go on to work for a while (a fleet run may
    wait 45 minutes for a model to load) call this first: what exists now is frozen (never
    scanned again) and collection resumes for what the run creates.
    """
    gc.freeze()
    gc.enable()


class _Warnings:
    """The warnings `quiet_warnings` held back, and where ``-v`` sends them (`show_warnings`)."""

    held: ClassVar[list[str]] = []
    write: ClassVar[Callable[[str], None] | None] = None


def quiet_warnings() -> None:
    """Python warnings are kept from the operator's terminal: shown with ``-v`` only.

    They are the libraries' messages to their callers: a cryptography release deprecating an
    algorithm paramiko 3.4.0 still names printed four lines of ``CryptographyDeprecationWarning``
    before every command's output (the one line of a bad input included), and into every
    scheduled run's mail. Nothing an operator can act on. ``-v`` shows them (`show_warnings`),
    where whoever reports a problem looks. Only the process deploy owns (the console script)
    calls this, so the test suite sees warnings as usual. No ``logging`` import (~10 ms): the
    commands that never log do not pay for it.
    """
    import warnings

    def hold(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        text = f"{filename}:{lineno}: {category.__name__}: {message}"
        if _Warnings.write is not None:
            _Warnings.write(text)
        elif len(_Warnings.held) < 100:
            _Warnings.held.append(text)

    warnings.showwarning = hold


def show_warnings(write: Callable[[str], None]) -> None:
    """``-v``: the warnings held back so far, and every later one, go to ``write``."""
    _Warnings.write = write
    held, _Warnings.held = _Warnings.held, []
    for text in held:
        write(text)


class Process:
    """How this interpreter may end (see `end_process` and `leave`).

    ``owned``: `deploy.cli.main` was called the way the console script and ``python -m
    deploy.cli`` call it, with no arguments (it parses ``sys.argv``): the process is deploy's.
    A caller that passes its own arguments (a test, the bench's profiler) embeds deploy in
    *its* process, which goes on after the command: there nothing here changes anything.
    ``quick``: the command ended through `end_process`, at a point where nothing is left for
    the interpreter's teardown to do.
    """

    owned = False
    quick = False


def end_process(code: int) -> NoReturn:
    """End the command with exit status ``code``, and let the process skip the interpreter's
    teardown (`leave`). Raises `SystemExit` like `sys.exit`, so every ``finally`` and ``with``
    on the way out still runs; only what comes after the whole command is skipped."""
    Process.quick = True
    sys.exit(code)


def leave(code: int) -> None:
    """Exit the process now with ``code`` if `end_process` ended the command; else return
    (and the caller lets the interpreter exit normally).

    After the last output the interpreter still takes ~25 ms (``apply``) to ~45 ms
    (``validate``, which never turns the collector back on) of CPU before the process is
    gone: one last full garbage collection and the release of every module and object —
    work whose only effect is freeing memory that the exit frees anyway. What the normal exit
    does that matters is done here first: stdout and stderr are flushed, logging's handlers
    flushed and closed (``logging.shutdown``, its exit handler). The files deploy writes are
    fsynced and closed where they are written, and the local lock is an ``flock`` the kernel
    releases. If a flush fails (a closed pipe) or a thread that is not a daemon still runs,
    this returns and the normal exit happens, exactly as before. Daemon threads (paramiko's
    transports, already closed by then; the progress heartbeat) end with the process either
    way, as they do at a normal exit.
    """
    if not (Process.owned and Process.quick):
        return
    try:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:  # the masking wrappers first, then what they wrap
                stream.flush()
    except (OSError, ValueError):
        return
    main = threading.main_thread()
    if any(not t.daemon for t in threading.enumerate() if t is not main):
        return
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
    os._exit(code)


def _inventory_path(value: str | None) -> Path:
    from deploy.config.locate import inventory_path

    return inventory_path(value)


def _playbook_dirs(inventory: Path) -> list[Path]:
    from deploy.config.locate import playbook_dirs

    return playbook_dirs(inventory)


def _playbooks_dir(inventory: Path) -> Path:
    """The directory ``deploy validate`` checks: the first of `deploy.config.locate.playbook_dirs`."""
    return _playbook_dirs(inventory)[0]


def _find_playbook(name: str, inventory: Path) -> Path:
    """The playbook ``name`` names (`deploy.config.locate.find_playbook`); a path is taken as it is."""
    from deploy.config.locate import find_playbook

    return find_playbook(name, inventory)


def _fail(error: DeployError, out: Any = None) -> NoReturn:
    click.echo(f"deploy: {error}", err=True)
    for warning in out.failed_early(str(error), error.exit_code) if out is not None else []:
        click.echo(f"deploy: warning: {warning}", err=True)
    end_process(error.exit_code)


inventory_option = click.option(
    "-i",
    "--inventory",
    metavar="FILE",
    help="Inventory file (default: $DEPLOY_INVENTORY, else ./hosts.yaml).",
)
limit_option = click.option(
    "-l",
    "--limit",
    "limit",
    multiple=True,
    metavar="PATTERN",
    help="Only these hosts: names, groups, globs, !exclusions (repeatable).",
)
accept_new_option = click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Trust and record host keys seen for the first time (changed keys are still refused).",
)
forks_option = click.option(
    "-f",
    "--forks",
    type=click.IntRange(1, 256),
    default=10,
    show_default=True,
    help="Hosts in parallel.",
)
workers_option = click.option(
    "--workers",
    type=click.IntRange(0, 64),
    default=None,
    metavar="N",
    help="Processes the hosts run in, this one included (1: one; 0 or unset: chosen, several "
    "on a multi-core workstation from 64 hosts at once; --forks stays the total).",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout (docs/json-report.md).",
)
colour_option = click.option(
    "--color",
    "color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour: auto is a terminal without NO_COLOR and not TERM=dumb.",
)


def want_colour(choice: str, stream: Any = None) -> bool:
    """``--color`` for ``stream`` (default stdout); see `deploy.report.human.use_colour`."""
    from deploy.report.human import use_colour

    return use_colour(stream or sys.stdout, choice)


_FILE = click.Path(dir_okay=False, path_type=Path)
_UNATTENDED = (
    click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        metavar="SECONDS",
        help="Overall limit: no host starts after it; a host still busy is reported interrupted.",
    ),
    click.option("--report", "report_file", type=_FILE, help="Also write the JSON report to FILE."),
    click.option("--log-file", type=_FILE, help="Append a plain, timestamped log to FILE."),
    click.option(
        "--notify-url", metavar="URL", help="POST a summary and the report there on exit != 0."
    ),
)


def unattended_options(command: Any) -> Any:
    """``--timeout``, ``--report``, ``--log-file``, ``--notify-url``: for scheduled runs."""
    for option in reversed(_UNATTENDED):
        command = option(command)
    return command
