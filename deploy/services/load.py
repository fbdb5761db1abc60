"""The throughput gate's load: warm-up, then waves of requests per concurrency, timed.

Used twice per run: on the old server before the run's first change (the baseline,
`measure_baseline`, in the engine's "before the first change" phase) and on the new one
(`deploy.steps.gate_throughput`), with the same `LoadSpec`, so the two are comparable. The arithmetic is `deploy.checks.throughput`.

Every request asks for exactly ``max_new_tokens`` with ``ignore_eos`` (a model that stops early
on one server and not on the other would otherwise decide the comparison), at temperature 0;
the tokens counted are the server's own ``meta_info.completion_tokens``, never the request's
``max_new_tokens``. The requests of a wave are sent at once, each on its own forwarded channel
of the run's SSH connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from deploy import interrupt
from deploy.checks.throughput import Level, rate
from deploy.errors import CheckFailed
from deploy.remote import http
from deploy.services.control import ServiceControl
from deploy.services.endpoint import endpoint_of_state
from deploy.services.probes import get, post_generate
from deploy.services.state import ServiceState


@dataclass(frozen=True)
class LoadSpec:
    """The load one measurement sends (the gate step's arguments, as the service sees them)."""

    prompt: str
    max_new_tokens: int
    #: Seconds per request.
    timeout: float
    #: Requests sent first and not counted (at the highest level).
    warmup: int
    #: Waves per level (the median counts).
    samples: int
    #: The concurrencies measured, in order.
    levels: tuple[int, ...]


def request_body(args: LoadSpec) -> dict[str, object]:
    """The POST /generate body every request of the gate sends."""
    return {
        "text": args.prompt,
        "sampling_params": {
            "max_new_tokens": args.max_new_tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
    }


def completion_tokens(svc: ServiceControl, args: LoadSpec) -> int:
    """One generation; the completion tokens the server reports.

    Raises:
        CheckFailed: not a 200, or no ``meta_info.completion_tokens`` in the answer.
    """
    data, raw = post_generate(svc, request_body(args), args.timeout)
    try:
        tokens = data["meta_info"]["completion_tokens"]
    except (KeyError, TypeError) as exc:
        raise CheckFailed(
            f"POST /generate gave no meta_info.completion_tokens: {raw[:200]!r}"
        ) from exc
    if type(tokens) is not int or tokens < 0:
        raise CheckFailed(f"POST /generate gave completion_tokens {tokens!r}, not a count")
    return tokens


def wave(svc: ServiceControl, args: LoadSpec, concurrency: int) -> float:
    """``concurrency`` requests at once; their completion tokens over the wave's wall time.

    Raises:
        Interrupted: the run was interrupted before the wave (`deploy.interrupt`).
    """
    interrupt.check()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        began = time.monotonic()
        counts = list(pool.map(lambda _: completion_tokens(svc, args), range(concurrency)))
        wall = time.monotonic() - began
    if sum(counts) <= 0:
        raise CheckFailed("the load generated no tokens")
    return rate(sum(counts), wall)


def measure(
    svc: ServiceControl, args: LoadSpec, note: Callable[[str], None] | None = None
) -> list[Level]:
    """Warm up (uncounted), then ``samples`` waves at each level of ``args.levels``.

    Raises:
        CheckFailed: a request failed or the server reported no tokens.
    """
    high = max(args.levels)
    with ThreadPoolExecutor(max_workers=high) as pool:  # warm-up: answers checked, not timed
        list(pool.map(lambda _: completion_tokens(svc, args), range(args.warmup)))
    levels = []
    for concurrency in args.levels:
        if note:
            note(f"measuring {svc.name}: {args.samples} samples at concurrency {concurrency}")
        samples = tuple(wave(svc, args, concurrency) for _ in range(args.samples))
        levels.append(Level(concurrency, samples))
    return levels


def measure_baseline(
    svc: ServiceControl,
    state: ServiceState,
    args: LoadSpec,
    note: Callable[[str], None] | None = None,
) -> tuple[list[Level] | None, str]:
    """The old server's figures for the gate to compare with: (levels, "") when measured,
    else (None, why not) — not running, not healthy, or a request failed."""
    if not state.running:
        return None, "old server was not running"
    svc.endpoint = endpoint_of_state(svc.spec, state)
    try:
        health = get(svc, svc.spec.health_path, timeout=30)
        if health.status != 200:
            return None, f"old server not healthy (HTTP {health.status})"
        if note:
            note(f"measuring {svc.name} before the first change (baseline)")
        return measure(svc, args, note), ""
    except (http.ServerUnavailable, CheckFailed) as exc:
        return None, f"old server could not be measured: {exc}"
