"""A worker process's own output is masked with the run's secrets (`deploy.engine.worker`).

Its stderr is the operator's terminal or log file: a traceback there (here: a frame that
cannot be read, whose error quotes a secret) shows the run's secrets as ``***``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from deploy.engine import shards

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-inventory-5e3cr3t-api-key"


class _Unreadable:
    """Unpickles as ``int(SECRET)``: a ValueError that quotes the secret."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return int, (SECRET,)


def test_a_workers_traceback_on_stderr_masks_the_runs_secrets() -> None:
    init = {
        "job": None,
        "secrets": {"provided": {}, "passphrases": {}, "can_ask": False},
        "log_level": logging.WARNING,
        "run_pid": os.getpid(),
        "masked": [SECRET],
    }
    worker = subprocess.run(
        [sys.executable, "-m", "deploy.engine.worker"],
        input=shards.encode(("init", init)) + shards.encode(("host", 0, _Unreadable())),
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    err = worker.stderr.decode()
    assert worker.returncode != 0 and "ValueError" in err, err
    assert SECRET not in err and "***" in err, err
    assert worker.stdout == b"", "nothing but frames on its stdout"
