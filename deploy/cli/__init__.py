"""The ``deploy`` command: arguments in, exit code out. It knows nothing of how steps work.

One module per command family: `apply` (a run), `rollback`, `records` (history, show,
status), `tools` (validate, schedule, schema, demo); `common` holds the options and input
paths they share, `runs` what apply and rollback share (progress, delivery, the printed
result and the exit).

Exit codes (DESIGN.md): 0 desired state, 1 failed and rolled back, 2 invalid input,
3 rollback failed (a human must look), 4 some host not attempted. Expected errors print one
line; anything else is a bug and prints a traceback with a request to report it.

Imports of the engine, SSH and YAML happen inside the commands, so ``deploy --help`` stays fast.
"""

from __future__ import annotations

import gc
from typing import Any

import click

from deploy.cli.apply import apply
from deploy.cli.common import CONTEXT, Process, leave, quiet_warnings
from deploy.cli.records import history, show, status
from deploy.cli.resolve import resolve
from deploy.cli.rollback import rollback
from deploy.cli.tools import demo, schedule, schema_command, validate
from deploy.masking import mask_terminal

__all__ = ["main"]


class _Program(click.Group):
    """The ``deploy`` group. Called with no arguments it is the program (the console script,
    ``python -m deploy.cli``): it owns the process, and a command that ended through
    `deploy.cli.common.end_process` leaves it without the interpreter's teardown, once every
    ``finally`` of the command has run (`deploy.cli.common.leave`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return super().__call__(*args, **kwargs)
        Process.owned = True
        try:
            return super().__call__()
        except SystemExit as exc:
            if isinstance(exc.code, int):
                leave(exc.code)
            raise


@click.group(cls=_Program, context_settings=CONTEXT)
@click.version_option(package_name="deploy")
def main() -> None:
    """Change live hosts over SSH, verified, with automatic rollback.

    \b
      deploy apply kimi-eagle3            plan, confirm, run on every host of the playbook
      deploy apply kimi-eagle3 --check    what would change, as a diff; touches nothing
      deploy rollback                     put back what the last run changed
      deploy history                      what ran where, when, with what outcome
      deploy status                       each host's lock, last run, unfinished runs
      deploy resolve RUN -m WHY           after a failed undo: you brought the host back
      deploy schedule kimi-eagle3 --on-calendar "Mon *-*-* 03:00"   a systemd timer for it
    """
    # Start-up is imports and validation: no garbage worth collecting (see `startup_done`).
    gc.disable()
    mask_terminal()  # secrets are *** in everything printed (deploy.masking)
    if Process.owned:
        quiet_warnings()  # the libraries' warnings: shown with -v only


for _command in (
    apply,
    rollback,
    resolve,
    validate,
    history,
    show,
    status,
    schedule,
    schema_command,
    demo,
):
    main.add_command(_command)
