"""Who hears a run as it goes: several listeners as one, and the tracker that knows where each
host is (what a deadline's message says of a host it stopped waiting for)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deploy.engine.results import StepResult

#: Whatever listens to a run (`deploy.engine.host_run.Progress`), typed loosely so that
#: listeners may offer the optional ``run_event(message)`` too.
Listener = Any


class Listeners:
    """Several progress listeners as one (the terminal and the log file, say)."""

    def __init__(self, *listeners: Listener) -> None:
        self.listeners = [listener for listener in listeners if listener is not None]

    def host_event(self, host: str, message: str) -> None:
        for listener in self.listeners:
            listener.host_event(host, message)

    def step_started(self, host: str, index: int, title: str) -> None:
        for listener in self.listeners:
            listener.step_started(host, index, title)

    def step_finished(self, host: str, result: StepResult) -> None:
        for listener in self.listeners:
            listener.step_finished(host, result)

    def run_event(self, message: str) -> None:
        run_event(self.listeners, message)


def run_event(listeners: Sequence[Listener], message: str) -> None:
    """Tell listeners that know ``run_event`` about the run as a whole (batches, deadline)."""
    for listener in listeners:
        hook = getattr(listener, "run_event", None)
        if hook is not None:
            hook(message)


class Tracker:
    """Remembers each host's current step, to say where a host was when the deadline hit."""

    def __init__(self, inner: Listener) -> None:
        self.inner = inner
        self.current: dict[str, str] = {}

    def host_event(self, host: str, message: str) -> None:
        self.inner.host_event(host, message)

    def step_started(self, host: str, index: int, title: str) -> None:
        self.current[host] = f"during step {index + 1} ({title})"
        self.inner.step_started(host, index, title)

    def step_finished(self, host: str, result: StepResult) -> None:
        self.current[host] = f"after step {result.index + 1} ({result.title}, {result.status})"
        self.inner.step_finished(host, result)

    def run_event(self, message: str) -> None:
        run_event([self.inner], message)
