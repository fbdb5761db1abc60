"""The throughput gate's load: warm-up, then waves of requests per concurrency, timed.

Used twice per run: on the old server just before the restart (the baseline, from
`deploy.steps.service`) and on the new one (`deploy.steps.gate_throughput`), with the same
arguments, so the two are comparable. The arithmetic is `deploy.checks.throughput`.

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
from typing import TYPE_CHECKING

from deploy import interrupt
from deploy.checks.throughput import Level, rate
from deploy.errors import CheckFailed
from deploy.steps.service_control import ServiceControl
from deploy.steps.service_generate import post_generate

if TYPE_CHECKING:
    from deploy.steps.gate_throughput import GateThroughputArgs


def request_body(args: GateThroughputArgs) -> dict[str, object]:
    """The POST /generate body every request of the gate sends."""
    return {
        "text": args.prompt,
        "sampling_params": {
            "max_new_tokens": args.max_new_tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
    }


def completion_tokens(svc: ServiceControl, args: GateThroughputArgs) -> int:
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


def wave(svc: ServiceControl, args: GateThroughputArgs, concurrency: int) -> float:
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
    svc: ServiceControl, args: GateThroughputArgs, note: Callable[[str], None] | None = None
) -> list[Level]:
    """Warm up (uncounted), then ``samples`` waves at each level of ``args.levels()``.

    Raises:
        CheckFailed: a request failed or the server reported no tokens.
    """
    high = max(args.levels())
    with ThreadPoolExecutor(max_workers=high) as pool:  # warm-up: answers checked, not timed
        list(pool.map(lambda _: completion_tokens(svc, args), range(args.warmup)))
    levels = []
    for concurrency in args.levels():
        if note:
            note(f"measuring {svc.name}: {args.samples} samples at concurrency {concurrency}")
        samples = tuple(wave(svc, args, concurrency) for _ in range(args.samples))
        levels.append(Level(concurrency, samples))
    return levels
