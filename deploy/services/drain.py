"""Stopping a server the way SGLang drains, with its progress said.

SGLang 0.5.9 on SIGTERM marks itself exiting — ``/health*`` answer 503 — but keeps admitting
new ``/generate`` requests, and exits once none is in flight (its ``sigterm_watchdog`` looks
every 5 s, with no deadline of its own). So a drain under steady traffic may never end by
itself: deploy bounds it with the service's ``drain_timeout``, then stops the process group.
While it waits, the in-flight count (``GET /get_load``: ``num_reqs + num_waiting_reqs`` over
its schedulers) is said every few seconds, so an operator sees why the stop takes time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from deploy.remote import http
from deploy.services.control import ServiceControl
from deploy.services.probes import get
from deploy.services.state import ServiceState

#: Seconds between drain progress lines.
PROGRESS_EVERY = 5.0


def in_flight(svc: ServiceControl) -> int | None:
    """Requests the server runs or queues now (``/get_load``), None when it does not say."""
    try:
        response = get(svc, "/get_load", timeout=10)
        loads = response.json() if response.status == 200 else None
    except (http.ServerUnavailable, ValueError):
        return None
    if isinstance(loads, dict):
        loads = [loads]
    if not isinstance(loads, list):
        return None
    try:
        return sum(int(item["num_reqs"]) + int(item.get("num_waiting_reqs", 0)) for item in loads)
    except (KeyError, TypeError, ValueError):
        return None


def stop(
    svc: ServiceControl,
    state: ServiceState,
    *,
    timeout: float | None = None,
    note: Callable[[str], None] | None = None,
    every: float = PROGRESS_EVERY,
) -> str:
    """`ServiceControl.stop` with a drain; while the process manager drains, say every
    ``every`` seconds how many requests are still in flight. One line of what was done.

    Raises:
        StepFailed: as `ServiceControl.stop`.
    """
    if note is None or not state.running or svc.spec.manager != "process":
        return svc.stop(state, timeout=timeout)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["done"] = svc.stop(state, timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    worker = threading.Thread(target=run, name=f"drain-{svc.name}", daemon=True)
    began = time.monotonic()
    worker.start()
    worker.join(every)
    while worker.is_alive():
        count = in_flight(svc)
        waiting = "in-flight count unknown" if count is None else f"{count} in flight"
        note(
            f"draining {svc.name} (pid {state.pid}): {time.monotonic() - began:.0f} s of at most "
            f"{svc.spec.drain_timeout:g} s, {waiting}"
        )
        worker.join(every)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return str(outcome["done"])
