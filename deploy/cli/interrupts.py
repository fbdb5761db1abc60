"""How ``deploy apply`` meets signals and an early death: kept apart from the commands.

SIGINT and SIGTERM (what systemd sends when a timer's job times out) cancel the run the first
time (`deploy.engine.host_run.Cancel`), abandon it the second; the run is in the
workstation's history before it touches a host, so even a killed run can be rolled back.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click


def interruptible(cancel: Any, run_id: str, playbook: str) -> None:
    """First SIGINT/SIGTERM: start no new step, roll back hosts mid-change, report (exit 1/3).

    A host whose commit was already sent behind its last check (`deploy.engine.verdicts`)
    commits if the check passes: the signal came after the run's last decision.

    A second signal abandons at once (exit 3), naming the hosts left mid-run and the command
    that recovers them: their journals record what changed, for the next apply or rollback.
    """
    import signal

    def handle(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if not cancel.is_set():
            cancel.set(f"interrupted by {name}")
            click.echo(
                f"\ndeploy: {name}: starting no new step; hosts mid-change are being rolled "
                "back, except where the commit was already sent behind its last check "
                "(send it again to abandon them at once)",
                err=True,
            )
            return
        busy = ", ".join(sorted(cancel.busy)) or "none"
        click.echo(
            f"\ndeploy: abandoned at once; left mid-run: {busy}. Their journals record what "
            f"changed: `deploy rollback {run_id}` undoes it (or the next `deploy apply "
            f"{playbook}` recovers it first); `deploy status` shows them",
            err=True,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)


def record_start(run: Any) -> None:
    """History knows a run before it touches a host, so a killed run can be rolled back."""
    from deploy.engine import history

    try:
        history.save(run)
    except OSError as exc:
        click.echo(f"deploy: warning: history not written: {exc}", err=True)
