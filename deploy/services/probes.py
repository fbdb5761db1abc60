"""Talking to a running server over HTTP: health, the readiness wait, generation.

Every request goes through the host's own connection to the server (`Host.http`: a channel of
the run's SSH connection to the address the server listens on, as seen on the host). The
readiness wait is what ``wait_healthy`` and the undo's restart share; ``generate`` is the one
way ``smoke`` and the throughput gate send ``POST /generate`` and word what a server that
answers badly did (not a 200, not JSON, no token count).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from deploy import interrupt
from deploy.checks.loglines import newest_line
from deploy.config.services import POLL_INTERVAL
from deploy.errors import CheckFailed, StepFailed
from deploy.remote import http
from deploy.services.control import ServiceControl

__all__ = ["POLL_INTERVAL", "generate", "get", "post", "post_generate", "wait_healthy"]


def get(svc: ServiceControl, path: str, timeout: float = 30.0) -> http.HttpResponse:
    """``GET path`` on the server where it listens, from the host, with its API key."""
    where = svc.endpoint
    return svc.remote.http(
        where.address, where.port, "GET", path, timeout=timeout, headers=where.headers()
    )


def post(svc: ServiceControl, path: str, body: Any, timeout: float = 300.0) -> http.HttpResponse:
    """``POST path`` with a JSON ``body`` on the server where it listens, with its API key."""
    where = svc.endpoint
    return svc.remote.http(
        where.address, where.port, "POST", path, body=body, timeout=timeout,
        headers=where.headers(),
    )  # fmt: skip


def wait_healthy(
    svc: ServiceControl,
    *,
    pid: int | None,
    path: str,
    timeout: float,
    interval: float = POLL_INTERVAL,
    log_offset: int = 0,
    on_progress: Callable[[str], None] | None = None,
) -> float:
    """Poll ``path`` until 200; refused and 503 mean "still loading". Returns the seconds.

    Raises:
        StepFailed: the process died, or ``timeout`` passed; the message carries the last
            40 lines of the server's log.
    """
    began = time.monotonic()
    last_note = 0.0
    status = "no answer yet"
    while True:
        try:
            response = get(svc, path, timeout=max(interval * 5, 10))
            if response.status == 200:
                return time.monotonic() - began
            status = f"HTTP {response.status}"
        except http.ServerUnavailable as exc:
            status = (
                "connection refused"
                if "refused" in str(exc).lower() or "connect failed" in str(exc).lower()
                else str(exc)
            )
        elapsed = time.monotonic() - began
        if not svc.alive(pid):
            raise StepFailed(
                f"{svc.name} (pid {pid}) exited after {elapsed:.0f} s, before it was healthy\n"
                + svc.log_excerpt(log_offset)
            )
        if elapsed > timeout:
            raise StepFailed(
                f"{svc.name} not healthy after {timeout:g} s (last: {status})\n"
                + svc.log_excerpt(log_offset)
            )
        if on_progress and time.monotonic() - last_note >= 5:
            # Not our own polls' access-log lines: what the server itself last said.
            newest = newest_line(svc.log_tail(log_offset, lines=20))
            log = f"; log: {newest[:120]}" if newest else ""
            on_progress(f"waiting for {svc.name}: {elapsed:.0f} s, {status}{log}")
            last_note = time.monotonic()
        # Cut short by the run's interrupt: the load is not waited out (deploy.interrupt).
        interrupt.pause(interval - (time.monotonic() - began - elapsed))


def post_generate(svc: ServiceControl, body: dict[str, Any], timeout: float) -> tuple[Any, bytes]:
    """One POST /generate, the one way smoke and gate send it: (parsed JSON, raw body).

    Raises:
        CheckFailed: unreachable, not a 200, or not JSON.
    """
    try:
        response = post(svc, "/generate", body, timeout=timeout)
    except http.ServerUnavailable as exc:
        raise CheckFailed(f"POST /generate failed: {exc}") from exc
    if response.status != 200:
        wants_key = (
            " (the server wants an API key: give the service's api_key, or start it with --api-key)"
            if response.status == 401 and not svc.endpoint.api_key
            else " (the API key sent was refused)"
            if response.status == 401
            else ""
        )
        raise CheckFailed(
            f"POST /generate answered HTTP {response.status}{wants_key}: {response.body[:200]!r}"
        )
    try:
        return response.json(), response.body
    except ValueError as exc:
        raise CheckFailed(f"POST /generate gave no JSON: {response.body[:200]!r}") from exc


def generate(
    svc: ServiceControl, prompt: str, max_new_tokens: int, timeout: float = 300.0
) -> tuple[str, int]:
    """One POST /generate; returns (text, completion_tokens).

    Raises:
        CheckFailed: not a 200, or no usable answer.
    """
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
    }
    data, raw = post_generate(svc, body, timeout)
    try:
        text = str(data.get("text", ""))
        tokens = int(data.get("meta_info", {}).get("completion_tokens", 0))
    except (ValueError, AttributeError, TypeError) as exc:
        raise CheckFailed(
            f"POST /generate gave no JSON with text and meta_info: {raw[:200]!r}"
        ) from exc
    return text, tokens
