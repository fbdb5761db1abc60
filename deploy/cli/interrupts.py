"""How ``deploy apply`` and ``deploy rollback`` meet signals and an early death.

SIGINT and SIGTERM (what systemd sends when a timer's job times out) cancel the run the first
time (`deploy.engine.run_options.Cancel`; its waits end at once, `deploy.interrupt`), abandon
it the second; the run is in the workstation's history before it touches a host, so even a
killed run can be rolled back. Ctrl-C at the confirmation prompt changes nothing: exit 130.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import click

from deploy.masking import mask


def interruptible(cancel: Any, run_id: str, playbook: str, *, undoing: str | None = None) -> None:
    """First SIGINT/SIGTERM: start no new step, cut every wait short (a loading server is not
    waited for), roll back hosts mid-change, report (exit 1/3).

    A host whose commit was already sent behind its last check (`deploy.engine.verdicts`)
    commits if the check passes: the signal came after the run's last decision.

    ``undoing`` (``deploy rollback`` of that run): the first signal starts no new host, and a
    host being undone finishes its undo (putting the host back is what was asked for; the old
    server's load takes what it takes). Hosts never started are reported skipped (exit 4).

    A second signal abandons at once (exit 3), naming the hosts left mid-run (or half undone)
    and the command that finishes the job: their journals record what changed.
    """
    import signal

    def handle(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if not cancel.is_set():
            cancel.set(f"interrupted by {name}")
            first = (
                "starting no new host; hosts being rolled back finish their undo"
                if undoing
                else "starting no new step and cutting waits short; hosts mid-change are "
                "being rolled back, except where the commit was already sent behind its "
                "last check"
            )
            _say(f"\ndeploy: {name}: {first} (send it again to abandon them at once)")
            return
        busy = ", ".join(sorted(cancel.busy)) or "none"
        if undoing:
            message = (
                f"abandoned at once; left half undone: {busy}. `deploy rollback {undoing}` "
                "finishes the job (their journals record what is undone); `deploy status` "
                "shows them"
            )
        else:
            message = (
                f"abandoned at once; left mid-run: {busy}. Their journals record what "
                f"changed: `deploy rollback {run_id}` undoes it (or the next `deploy apply "
                f"{playbook}` recovers it first); `deploy status` shows them"
            )
        _say(f"\ndeploy: {message}")
        os._exit(3)

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def _say(line: str) -> None:
    """One line to stderr from a signal handler: straight to the fd, no Python buffer.

    The handler runs in the main thread between two bytecodes, possibly in the middle of a
    write to ``sys.stderr`` (a nested call: the buffer refuses it), or while a host's thread
    holds the buffer's lock in a write; a second signal may even arrive inside the first
    handler. ``os.write`` takes no lock, so the handler always gets to its end (and a second
    signal always to its exit), whatever the other threads are doing.
    """
    data = (mask(line) + "\n").encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data) :]


def confirmed(question: str) -> bool:
    """Ask ``question`` (default no). Ctrl-C at the prompt: "Nothing was changed.", exit 130.

    Nothing has been touched while the question is open, so an interrupt there is not a
    failure: the shell's convention for "stopped by SIGINT" (128 + 2).
    """
    from deploy.cli.common import end_process

    try:
        return click.confirm(question, default=False)
    except click.Abort:
        click.echo("\nNothing was changed.")
        end_process(130)


def record_start(run: Any) -> None:
    """History knows a run before it touches a host, so a killed run can be rolled back."""
    from deploy.engine import history

    try:
        history.save(run)
    except OSError as exc:
        click.echo(f"deploy: warning: history not written: {exc}", err=True)
