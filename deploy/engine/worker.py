"""A worker process of a run (``python -m deploy.engine.worker``; `deploy.engine.workers`).

It reads frames on stdin: the run's job and secrets first, then hosts to run and, maybe, a
cancel. Each host runs on a thread of its own through the job, as in a one-process run, and
all it says goes back on stdout as frames (stdout is the pipe alone: anything printed goes to
stderr, masked with the run's secrets: the parent's terminal or log file). SIGINT and SIGTERM are ignored: the parent decides and sends a cancel. When stdin
ends — the run is over, or the parent died — the worker exits at once, leaving any host it
still has as a dead run's threads would: its journal says what changed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import warnings
from functools import partial
from typing import IO, Any

from deploy.engine import shards
from deploy.engine.results import StepResult


class _Out:
    """Frames to the parent, one at a time whatever thread sends them."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, message: Any) -> None:
        frame = shards.encode(message)
        with self.lock:
            try:
                self.stream.write(frame)
                self.stream.flush()
            except (OSError, ValueError):  # the parent is gone
                os._exit(3)


class _Relay:
    """The progress listener a worker's hosts talk to: all of it goes to the parent's."""

    def __init__(self, out: _Out) -> None:
        self.out = out

    def host_event(self, host: str, message: str) -> None:
        self.out.send(("event", "host_event", (host, message)))

    def step_started(self, host: str, index: int, title: str) -> None:
        self.out.send(("event", "step_started", (host, index, title)))

    def step_finished(self, host: str, result: StepResult) -> None:
        self.out.send(("event", "step_finished", (host, result)))

    def busy(self, host: str, title: str) -> None:
        self.out.send(("event", "busy", (host, title)))

    def idle(self, host: str) -> None:
        self.out.send(("event", "idle", (host,)))


class _Begun(set[str]):
    """`Cancel.busy` that tells the parent: its second signal names the hosts left mid-run,
    and a worker's death tells begun hosts from untouched ones."""

    def __init__(self, out: _Out) -> None:
        super().__init__()
        self.out = out

    def add(self, name: str) -> None:
        super().add(name)
        self.out.send(("begun", name))

    def discard(self, name: object) -> None:
        super().discard(name)
        self.out.send(("ended", name))


class _LogRelay(logging.Handler):
    def __init__(self, out: _Out) -> None:
        super().__init__()
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.out.send(("log", record.name, record.levelno, self.format(record)))
        except Exception:
            self.handleError(record)


class _Asks:
    """A key passphrase asked of the parent (it has the terminal): one question at a time."""

    def __init__(self, out: _Out) -> None:
        self.out = out
        self.answers: dict[int, str] = {}
        self.events: dict[int, threading.Event] = {}
        self.lock = threading.Lock()
        self.next = 0

    def __call__(self, prompt: str) -> str:
        with self.lock:
            key, self.next = self.next, self.next + 1
            self.events[key] = threading.Event()
        self.out.send(("ask", key, prompt))
        self.events[key].wait()
        return self.answers.pop(key)

    def answer(self, key: int, value: str) -> None:
        from deploy import masking

        masking.register(value)  # typed after this worker started: its stderr masks it too
        self.answers[key] = value
        self.events.pop(key).set()


class _Warnings:
    """Python warnings (a library's deprecations, at import): the parent keeps them from the
    terminal unless ``-v`` (`deploy.cli.common.quiet_warnings`), so a worker holds them until
    it knows, then sends them to the parent's log or drops them."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.send: Any = None
        warnings.showwarning = self.show

    def show(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: IO[str] | None = None,
        line: str | None = None,
    ) -> None:
        text = f"{filename}:{lineno}: {category.__name__}: {message}"
        if self.send is None:
            self.held.append(text)
        else:
            self.send(text)

    def to(self, send: Any) -> None:
        self.send = send
        held, self.held = self.held, []
        for text in held:
            send(text)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    said = _Warnings()  # before paramiko's import (the job's unpickling, below)
    # stdout is the pipe to the parent: keep it for frames, send fd 1 to stderr.
    out = _Out(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    first = shards.read_message(stdin)
    if first is None or first[0] != "init":
        os._exit(2)
    init = first[1]
    job = init["job"]
    asks = _Asks(out)
    from deploy.remote.sshauth import take_secrets

    take_secrets(init["secrets"], asks)
    from deploy import masking

    for value in init["masked"]:
        masking.register(value)
    # A key a host finds goes to the parent first: the frames that may quote it come after.
    masking.MASKER.on_add(lambda value: out.send(("secret", value)))
    sys.stdout = sys.stderr = masking.MaskedStream(sys.stderr)  # tracebacks, lastResort logs
    relay_logs = _LogRelay(out)
    relay_logs.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("deploy")
    logger.addHandler(relay_logs)
    logger.setLevel(init["log_level"])
    logger.propagate = False
    said.to(logging.getLogger("deploy.warnings").warning if verbose(init) else lambda _: None)
    from deploy import interrupt
    from deploy.engine.host_jobs import guarded
    from deploy.engine.run_options import Cancel, run_by

    run_by(init["run_pid"])
    cancel = Cancel()
    cancel.busy = _Begun(out)
    relay = _Relay(out)

    def run(key: int, host: Any) -> None:
        name = job.name(host)
        with interrupt.watched(cancel):
            result = guarded(name, lambda: job.run(host, relay, cancel))
        try:
            out.send(("done", key, result))
        except Exception as exc:  # a result that cannot be sent must not leave the parent waiting
            out.send(("done", key, guarded(name, partial(_unsendable, exc))))

    while True:
        message = shards.read_message(stdin)
        if message is None:
            os._exit(0)
        kind = message[0]
        if kind == "host":
            threading.Thread(target=run, args=message[1:], daemon=True).start()
        elif kind == "cancel":
            cancel.set(message[1])
        elif kind == "answer":
            asks.answer(message[1], message[2])


def _unsendable(exc: Exception) -> Any:
    raise RuntimeError(f"the host's result could not be sent to the run: {exc!r}")


def verbose(init: dict[str, Any]) -> bool:
    """Whether the run shows warnings: ``-v`` (the parent's ``deploy`` logger at INFO)."""
    return bool(init["log_level"] <= logging.INFO)


if __name__ == "__main__":
    main()
