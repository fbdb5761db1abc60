"""A run's hosts in several processes (`deploy.engine.shards` says when and how many).

The parent keeps every decision and every output: its fleet loop (`deploy.engine.fleet`)
starts each host on one of its own threads exactly as in a one-process run — so ``forks`` is
the run's total, batches and ``max_fail`` are decided from all hosts, the deadline and the
signals act as before — and that thread runs the host where the fewest hosts are busy: itself
(the run's own share), or by handing it to a worker process (`Pool.run`) and waiting for the
result. With ``--workers N`` the run is N processes: its own and N - 1 workers. A worker
(`deploy.engine.worker`) runs each host it is given on a thread of its own, through the same
`deploy.engine.host_jobs` job, and sends back everything the host says (progress lines, step
results, its busy/idle heartbeat, log records) and its `HostResult`; the parent hands them to
its listeners, so the terminal, ``--json``, the log file and the history are the same as with
one process (only interleaved host lines may come in another order). Each host still writes
its own journal on the host.

Processes, not threads of a fork: each worker is a fresh ``python -m deploy.engine.worker``
(forking a process with live threads and sockets copies locks in whatever state they are).
Frames are pickles over the worker's stdin and stdout (`deploy.engine.shards.encode`); the
run's secrets (passwords asked for with ``--ask-pass``/``-K``, key passphrases) go over that
pipe too, never on a command line, in the environment or in a file. A key passphrase a worker
finds missing is asked for by the parent, on its terminal, once per key. Masking
(`deploy.masking`) is the parent's, which writes every output: a worker is given the secrets
registered so far (its stderr masks them too), and a secret a worker's host finds (a server's
API key) is sent to the parent before anything that could quote it.

Signals: workers run in a process group of their own, so the terminal's Ctrl-C reaches only
the parent, whose handler decides as before; the first signal (or ``--timeout``) is passed on
as a cancel message, and the workers' hosts start no new step and roll back. They ignore
SIGINT and SIGTERM themselves (systemd signals the whole unit). A second signal ends the
parent at once: a worker sees its stdin close and exits at once too, as the threads of a
one-process run die with it. A worker that dies (killed, crashed) closes its stdout: each host
it had is reported — "interrupted" (a human must look: its journal says what changed) if it had
begun, "not attempted" if not — with one line saying which worker died and how; the run goes
on with the others (its own process included), and never waits for the dead one. A worker
that cannot be started at all (``sys.executable`` gone) is one line, and its share of the
hosts runs in the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from deploy import masking
from deploy.engine import shards
from deploy.engine.results import HostResult
from deploy.engine.run_options import Cancel

log = logging.getLogger("deploy.engine")

#: Seconds a worker is given to exit once its stdin is closed, before it is killed.
_EXIT_GRACE = 5.0


@dataclass
class _Ticket:
    """One host handed to a worker: its result, when it comes."""

    name: str
    done: threading.Event = field(default_factory=threading.Event)
    result: HostResult | None = None


class _Worker:
    def __init__(self, number: int, init: dict[str, Any]) -> None:
        self.number = number
        self.process = subprocess.Popen(
            [sys.executable, "-m", "deploy.engine.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            process_group=0,  # the terminal's Ctrl-C is the parent's to decide
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin: IO[bytes] = self.process.stdin
        self.stdout: IO[bytes] = self.process.stdout
        self.write_lock = threading.Lock()
        self.alive = True
        self.load = 0
        self.tickets: dict[int, _Ticket] = {}
        #: Hosts that have begun (between their lock and their outcome): a crash leaves them
        #: mid-run, where the hosts not yet begun were never touched.
        self.begun: set[str] = set()
        self.send(("init", init))

    def send(self, message: Any) -> bool:
        frame = shards.encode(message)
        with self.write_lock:
            try:
                self.stdin.write(frame)
                self.stdin.flush()
            except (OSError, ValueError):  # it died: its reader reports its hosts
                return False
        return True

    def how_it_ended(self) -> str:
        try:
            code = self.process.wait(timeout=_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"


class Pool:
    """The run's own process and ``count - 1`` worker processes; `run` is a host's work, as
    the fleet loop calls it.

    ``job`` is a `deploy.engine.host_jobs` job; ``local`` runs a host on the calling thread
    (the run's own share: one process fewer to start, ~0.5 CPU-s and ~55 MB each); ``sink``
    hears every host's progress; ``cancel`` is the run's switch (apply's cancel, rollback's
    halt): set, it is passed on to every worker. Close the pool (a context manager) when the
    run ends.
    """

    def __init__(
        self,
        count: int,
        job: Any,
        sink: Any,
        cancel: Cancel | None,
        local: Callable[[Any], HostResult],
    ) -> None:
        self.sink = sink
        self.cancel = cancel
        self.local = local
        self.local_load = 0
        self.lock = threading.Lock()
        self.next_key = 0
        self.closed = threading.Event()
        init = {
            "job": job,
            "secrets": _secrets(),
            "masked": masking.MASKER.secrets(),
            "log_level": _log_level(),
            "run_pid": os.getpid(),
        }
        self.workers: list[_Worker] = []
        for number in range(1, count):
            try:
                self.workers.append(_Worker(number, init))
            except OSError as exc:  # no interpreter to start (a removed virtualenv's)
                log.warning(
                    "worker process %d cannot start (%s: %s): its share of the hosts runs in "
                    "the other processes",
                    number,
                    sys.executable or "no Python interpreter",
                    exc.strerror or exc,
                )
        for worker in self.workers:
            threading.Thread(
                target=self._read, args=(worker,), name=f"worker-{worker.number}", daemon=True
            ).start()
        if cancel is not None:
            threading.Thread(target=self._pass_cancel, name="worker-cancel", daemon=True).start()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def run(self, host: Any, name: str) -> HostResult:
        """Run ``host`` where the fewest hosts are busy: here, or in a live worker (wait for
        its result)."""
        ticket = _Ticket(name)
        with self.lock:
            loads = [self.local_load, *(w.load if w.alive else None for w in self.workers)]
            number = shards.pick(loads) or 0
            if number == 0:
                self.local_load += 1
            else:
                worker = self.workers[number - 1]
                key = self.next_key
                self.next_key += 1
                worker.tickets[key] = ticket
                worker.load += 1
        if number == 0:
            try:
                return self.local(host)
            finally:
                with self.lock:
                    self.local_load -= 1
        worker.send(("host", key, host))
        ticket.done.wait()
        assert ticket.result is not None
        return ticket.result

    def close(self) -> None:
        """End the workers: stdin closed, a worker exits at once (any host it still has is
        one the run gave up on, as a one-process run's leftover threads die at its exit)."""
        self.closed.set()
        for worker in self.workers:
            with worker.write_lock, contextlib.suppress(OSError):
                worker.stdin.close()
        until = time.monotonic() + _EXIT_GRACE  # one grace for all: stuck workers add none
        for worker in self.workers:
            _reap(worker, until)

    def _pass_cancel(self) -> None:
        assert self.cancel is not None
        while not self.closed.is_set():
            if self.cancel.wait(0.05):
                for worker in self.workers:
                    worker.send(("cancel", self.cancel.reason))
                return

    def _read(self, worker: _Worker) -> None:
        """Everything a worker says, until its stdout ends (its exit, or its death) or a frame
        cannot be read (a bug): then the worker is killed and its hosts reported as for a
        death — the run never waits for results that can no longer come."""
        while True:
            try:
                message = shards.read_message(worker.stdout)
            except Exception as exc:  # a frame this process cannot read: the worker is lost
                log.error("worker %d: unreadable frame (%r): ending it", worker.number, exc)
                with contextlib.suppress(OSError):
                    worker.process.kill()
                break
            if message is None:
                break
            try:
                self._handle(worker, message)
            except Exception:  # a listener's bug must not leave the hosts waiting forever
                log.exception("worker %d: cannot handle %r", worker.number, message[0])
        self._ended(worker)

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "event":
            _, method, args = message
            hook = getattr(self.sink, method, None)
            if hook is not None:
                hook(*args)
        elif kind == "begun":
            worker.begun.add(message[1])
            if self.cancel is not None:
                self.cancel.busy.add(message[1])
        elif kind == "ended":
            worker.begun.discard(message[1])
            if self.cancel is not None:
                self.cancel.busy.discard(message[1])
        elif kind == "done":
            _, key, result = message
            with self.lock:
                ticket = worker.tickets.pop(key)
                worker.load -= 1
            ticket.result = result
            ticket.done.set()
        elif kind == "secret":  # found on a host (an API key): every output here masks it
            masking.register(message[1])
        elif kind == "log":
            _, name, level, text = message
            logging.getLogger(name).log(level, "%s", text)
        elif kind == "ask":
            _, key, prompt = message
            threading.Thread(target=self._answer, args=(worker, key, prompt), daemon=True).start()

    def _answer(self, worker: _Worker, key: int, prompt: str) -> None:
        from deploy.remote.sshauth import ask_passphrase

        worker.send(("answer", key, ask_passphrase(prompt)))

    def _ended(self, worker: _Worker) -> None:
        with self.lock:
            worker.alive = False
            tickets = list(worker.tickets.values())
            worker.tickets.clear()
        if not tickets:  # its exit is reaped by `close`
            return
        if self.closed.is_set():
            # The run is over and gave up on these hosts (a rollback's deadline): its report
            # already says so; nobody waits for these results, and no line is due.
            for ticket in tickets:
                ticket.result = HostResult(host=ticket.name, outcome="interrupted")
                ticket.done.set()
            return
        how = worker.how_it_ended()
        pid = worker.process.pid
        for ticket in tickets:
            if ticket.name in worker.begun:
                if self.cancel is not None:
                    self.cancel.busy.discard(ticket.name)
                result = HostResult(
                    host=ticket.name,
                    outcome="interrupted",
                    error=f"worker process {worker.number} (pid {pid}) died ({how}) while this "
                    "host ran: deploy undid nothing; its journal records what changed, and the "
                    "next `deploy apply` or `deploy rollback` there undoes it first "
                    "(`deploy status` shows it)",
                )
            else:
                result = HostResult(
                    host=ticket.name,
                    outcome="not attempted",
                    error=f"worker process {worker.number} (pid {pid}) died ({how}) before this "
                    "host began: nothing was done there",
                )
            try:
                self.sink.host_event(ticket.name, result.error)
            except Exception:
                log.exception("worker %d: cannot report %s", worker.number, ticket.name)
            ticket.result = result
            ticket.done.set()


def _reap(worker: _Worker, until: float) -> None:
    """Wait for a worker's exit (killed at ``until``), and say (``-v``) what it cost: the
    run's CPU and memory per process, which the fleet's total alone does not show."""
    pid = worker.process.pid
    while True:
        try:
            done, status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped (a death reported by its reader)
            return
        if done:
            break
        if time.monotonic() > until:
            worker.process.kill()
            until = float("inf")
        time.sleep(0.01)
    worker.process.returncode = os.waitstatus_to_exitcode(status)
    log.info(
        "worker process %d: %.2f CPU-s, %d MB at most",
        worker.number,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss // 1024,
    )


def _secrets() -> dict[str, Any]:
    from deploy.remote.sshauth import secrets_for_worker

    return secrets_for_worker()


def _log_level() -> int:
    return logging.getLogger("deploy").getEffectiveLevel()
