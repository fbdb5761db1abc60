"""Waits that an interrupt cuts short: a run's Ctrl-C or SIGTERM acts now, not after a load.

A host's work runs on a thread of its own (`deploy.engine.fleet`); the run's cancel switch
(`deploy.engine.run_options.Cancel`, flipped by the first SIGINT/SIGTERM or by ``--timeout``)
is made that thread's for as long as it works (`watched`). Every wait of a forward change —
the readiness poll of a loading server, the pauses of the smoke test and the gate — sleeps
through `pause`, which raises `deploy.errors.Interrupted` the moment the switch flips: the
step fails at once, and the host is put back as after any failure (the loading server stopped,
the old files and server restored). Without this, Ctrl-C during a model load waited out the
load (up to the readiness timeout, 45 minutes) before rolling back.

The undo itself is never cut short by the first signal (`shielded`): putting the host back is
what the signal asked for, and the old server's own load takes what it takes, with progress. A
second signal abandons the run at once (`deploy.cli.interrupts`).

No module below the engine imports the engine: this one knows only "something with
``wait(seconds) -> bool`` and a ``reason``".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from deploy.errors import Interrupted


class Switch(Protocol):
    reason: str

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


_local = threading.local()


@contextmanager
def watched(switch: Switch | None) -> Iterator[None]:
    """Make ``switch`` this thread's for the duration: its waits end when it flips."""
    previous = getattr(_local, "switch", None)
    _local.switch = switch
    try:
        yield
    finally:
        _local.switch = previous


@contextmanager
def shielded() -> Iterator[None]:
    """Waits inside are not cut short (an undo in progress runs to its end)."""
    with watched(None):
        yield


def check() -> None:
    """Raise `Interrupted` if this thread's run was interrupted.

    Raises:
        Interrupted: the switch is set.
    """
    switch: Switch | None = getattr(_local, "switch", None)
    if switch is not None and switch.is_set():
        raise Interrupted(f"{switch.reason}: the wait was cut short")


def pause(seconds: float) -> None:
    """Sleep ``seconds``, or less: raise `Interrupted` as soon as the run is interrupted.

    Raises:
        Interrupted: the switch is set (before or during the pause).
    """
    switch: Switch | None = getattr(_local, "switch", None)
    if switch is None:
        time.sleep(max(0.0, seconds))
        return
    check()
    if switch.wait(max(0.0, seconds)):
        check()
