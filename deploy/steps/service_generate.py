"""Generation requests to a running service: the one way ``smoke`` and the throughput gate
send ``POST /generate`` and read its answer.

Kept apart from `deploy.steps.service_control`, which finds, stops, starts and health-checks the
service: these talk to the model, through the same forwarded connection (`ServiceControl.post`),
and word what a server that answers badly did (not a 200, not JSON, no token count).
"""

from __future__ import annotations

from typing import Any

from deploy.errors import CheckFailed
from deploy.remote import http
from deploy.steps.service_control import ServiceControl


def post_generate(svc: ServiceControl, body: dict[str, Any], timeout: float) -> tuple[Any, bytes]:
    """One POST /generate, the one way smoke and gate send it: (parsed JSON, raw body).

    Raises:
        CheckFailed: unreachable, not a 200, or not JSON.
    """
    try:
        response = svc.post("/generate", body, timeout=timeout)
    except http.ServerUnavailable as exc:
        raise CheckFailed(f"POST /generate failed: {exc}") from exc
    if response.status != 200:
        raise CheckFailed(
            f"POST /generate answered HTTP {response.status}: {response.body[:200]!r}"
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
