"""The run's side of a worker (`deploy.engine.workers.Pool`): a frame it cannot read ends
that worker and reports its hosts, rather than killing the reader and leaving the run
waiting forever for their results."""

from __future__ import annotations

import io
import pickle
import subprocess
import threading
import time
from typing import Any

import pytest

from deploy.engine import shards, workers
from deploy.engine.results import HostResult


class _Unreadable:
    """Pickles fine, fails to unpickle (as a result holding a type the run cannot rebuild)."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return int, ("not a number",)


class _Sink:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def host_event(self, host: str, message: str) -> None:
        self.said.append((host, message))


def _local(host: Any) -> HostResult:
    raise AssertionError("not run here")


def test_an_unreadable_frame_ends_the_worker_and_reports_its_hosts() -> None:
    sink = _Sink()
    pool = workers.Pool(1, None, sink, None, _local)  # no worker started: one is made below
    body = pickle.dumps(("done", 0, _Unreadable()))
    worker: Any = object.__new__(workers._Worker)
    worker.number = 1
    worker.process = subprocess.Popen(["sleep", "60"])
    worker.stdout = io.BytesIO(shards._HEADER.pack(len(body)) + body)
    worker.alive, worker.load, worker.begun = True, 1, {"gpu-1"}
    ticket = workers._Ticket("gpu-1")
    worker.tickets = {0: ticket}

    reader = threading.Thread(target=pool._read, args=(worker,), daemon=True)
    reader.start()
    assert ticket.done.wait(30), "the host's result never came"
    reader.join(5)
    assert ticket.result is not None and ticket.result.outcome == "interrupted"
    assert "worker process 1" in (ticket.result.error or "")
    assert sink.said and sink.said[0][0] == "gpu-1"
    assert worker.process.poll() is not None, "the worker is ended"
    assert not worker.alive


def test_closing_gives_stuck_workers_one_grace_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that do not exit when their stdin closes are killed after one `_EXIT_GRACE`
    for all of them, not one each: three stuck workers held the end of a run 15 s."""
    monkeypatch.setattr(workers, "_EXIT_GRACE", 1.0)
    pool = workers.Pool(1, None, _Sink(), None, _local)  # no worker started: made below
    stuck = []
    for number in (1, 2, 3):
        worker: Any = object.__new__(workers._Worker)
        worker.number = number
        worker.process = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
        worker.stdin, worker.write_lock = worker.process.stdin, threading.Lock()
        stuck.append(worker)
    pool.workers = stuck
    began = time.monotonic()
    pool.close()
    took = time.monotonic() - began
    assert all(worker.process.returncode is not None for worker in stuck), "every one ended"
    assert 1.0 <= took < 2.0, f"closing took {took:.1f} s"
