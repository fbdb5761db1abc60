"""`holder_info`: who runs, in the words a lock and a journal give another operator.

Its own module, importing nothing of the SSH stack, so that the CLI can take the
workstation's lock before it imports that stack (`deploy.engine.prepare`).
"""

from __future__ import annotations

import getpass
import os
import socket
from datetime import UTC, datetime
from typing import Any


def now_iso() -> str:
    """Now, to the second, as locks, journals and reports write it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


#: The run's own process, named in locks and journals: a worker process of the run
#: (`deploy.engine.worker`) names the ``deploy`` command it works for, not itself.
_RUN_PID: list[int] = []


def run_by(pid: int) -> None:
    """In a worker process: the pid of the run's process, for `holder_info`."""
    _RUN_PID[:] = [pid]


def holder_info(run_id: str, playbook: str) -> dict[str, Any]:
    """Who holds a lock: enough for another operator to find the run and its owner."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "run_id": run_id,
        "user": user,
        "workstation": socket.gethostname(),
        "pid": _RUN_PID[0] if _RUN_PID else os.getpid(),
        "since": now_iso(),
        "playbook": playbook,
    }
