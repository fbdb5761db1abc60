"""A key passphrase a worker process asked the parent for is masked in the worker's own output.

The worker's stderr is the operator's terminal or log file, written past the parent's masking
(`deploy.engine.worker`). The secrets it masks were those registered when it started; a
passphrase typed later, for a key one of its hosts met, was never among them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from deploy.engine import shards
from deploy.engine.results import HostResult

REPO = Path(__file__).resolve().parents[2]
PASSPHRASE = "typed-later-key-passphrase"


class AskingJob:
    """A worker's job whose host needs a key's passphrase, then writes it to stderr (as a
    traceback or a library's last-resort log line quoting it would)."""

    def name(self, host: Any) -> str:
        return str(host)

    def run(self, host: Any, relay: Any, cancel: Any) -> HostResult:
        from deploy.remote import sshauth

        answer = sshauth._PROMPTER[0]("Passphrase for key /home/ops/.ssh/id_ed25519")
        sys.stderr.write(f"unlocked with {answer}\n")
        sys.stderr.flush()
        return HostResult(host=str(host), outcome="unchanged")


def test_a_passphrase_answered_after_the_worker_started_is_masked_on_its_stderr() -> None:
    init = {
        "job": AskingJob(),
        "secrets": {"provided": {}, "passphrases": {}, "can_ask": True},
        "log_level": logging.WARNING,
        "run_pid": os.getpid(),
        "masked": [],
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "deploy.engine.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(shards.encode(("init", init)) + shards.encode(("host", 0, "gpu-1")))
    worker.stdin.flush()
    kinds = []
    while (message := shards.read_message(worker.stdout)) is not None:
        kinds.append(message[0])
        if message[0] == "ask":
            worker.stdin.write(shards.encode(("answer", message[1], PASSPHRASE)))
            worker.stdin.flush()
        if message[0] == "done":
            break
    worker.stdin.close()  # the run is over: the worker exits
    assert worker.stderr is not None
    err = worker.stderr.read()
    worker.wait(timeout=60)
    worker.stdout.close()
    worker.stderr.close()
    assert kinds[0] == "ask" and kinds[-1] == "done", kinds
    assert "unlocked with ***" in err.decode(), err.decode()
    assert PASSPHRASE not in err.decode()
