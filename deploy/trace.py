"""Observation hooks: named spans at deploy's wire and phase boundaries, for whoever listens.

A profiler (``bench/profile.py``) wants to know where a run's time goes: loading the inputs,
connecting, taking the lock, each command on the host, each wait for the file helper's
answers, each step's plan/apply/verify. Wrapping those functions by attribute name from the
outside breaks silently when one is renamed; here the product itself says where its
boundaries are, under stable names (`SPANS`), and a listener subscribes to them.

Nobody listens in a normal run: `span` and the `spanned` wrapper then cost one check of an
empty list (no clock read, no allocation), so the hooks stay in place for good. A listener is
called in the thread that ran the span, after it ended (also when it raised), with
``(name, detail, start, end)``: ``start`` and ``end`` are `time.perf_counter` values,
``detail`` says which one (the command, the step's kind) and may be empty. A listener must be
quick and must not raise; it is a measuring instrument, never part of the run. Commands are
passed as the run has them: a listener that writes them anywhere must mask secrets itself.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

#: Every span the product emits, by name, with what it covers. ``tests/integration/
#: test_profile.py`` runs the profiler on a sandbox host and fails when one is not seen.
SPANS: dict[str, str] = {
    "config.load_inventory": "reading and validating hosts.yaml",
    "config.load_playbook": "reading and validating a playbook",
    "config.resolve": "templating a playbook's vars and steps for one host",
    "engine.run_apply": "a whole `deploy apply` over every host (the main thread)",
    "ssh.connect": "connecting and logging in to one host: TCP connect, key exchange, "
    "host-key check, authentication",
    "lock.acquire": "the lock's exec until it answers READY (prefetched reads included)",
    "lock.release": "ending the lock's command loop and waiting for its exit",
    "host.run": "one shell command on a host (detail: the command)",
    "host.check": "sending a check that is answered with the commit (detail: the command)",
    "session.wait": "blocking for the file helper's answers (a round trip)",
    "step.plan": "a step's plan (detail: the step's kind)",
    "step.before_first_change": "a step's work just before the run's first change to the "
    "host, once per run, never under --check (detail: the step's kind; the throughput "
    "gate's baseline on the old server)",
    "step.apply": "a step's apply (detail: the step's kind)",
    "step.verify": "a step's verify (detail: the step's kind)",
    "host.close": "closing a host's SSH connection",
    "history.save": "writing the run's report on the workstation",
}

Listener = Callable[[str, str, float, float], None]
_listeners: list[Listener] = []

P = ParamSpec("P")
R = TypeVar("R")


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` for every span from now on; returns the function that unsubscribes."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def _emit(name: str, detail: str, start: float) -> None:
    end = time.perf_counter()
    for listener in tuple(_listeners):
        listener(name, detail, start, end)


def record(name: str, detail: str, start: float) -> None:
    """A span that began at ``start`` (`time.perf_counter`) and ends now, for a phase that
    began before the function that ends it (a handshake's banner, sent before its import)."""
    if _listeners:
        _emit(name, detail, start)


@contextlib.contextmanager
def _timed(name: str, detail: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        _emit(name, detail, start)


_IDLE = contextlib.nullcontext()


def span(name: str, detail: str = "") -> contextlib.AbstractContextManager[None]:
    """``with span("step.plan", kind):`` — a span around the block (`SPANS` names it)."""
    return _timed(name, detail) if _listeners else _IDLE


def spanned(
    name: str, detail: Callable[..., str] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function so each call is a span ``name``; ``detail(*args, **kwargs)`` (same
    arguments as the call) says which, computed only while someone listens."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if not _listeners:
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                _emit(name, detail(*args, **kwargs) if detail else "", start)

        return call

    return decorate
