"""The throughput gate's load: warm-up, then waves of requests per concurrency, timed.

Used twice per run: on the old server before the run's first change (the baseline,
`measure_baseline`, in the engine's "before the first change" phase) and on the new one
(`deploy.steps.gate_throughput`), with the same `LoadSpec`, so the two are comparable. The arithmetic is `deploy.checks.throughput`.

Every request asks for exactly ``max_new_tokens`` with ``ignore_eos`` (a model that stops early
on one server and not on the other would otherwise decide the comparison), at temperature 0;
the tokens counted are the server's own ``meta_info.completion_tokens``, never the request's
``max_new_tokens``. The requests of a wave are sent at once from the host itself
(`deploy.services.loadgen`), never through the SSH connection, which would bound and blur
what 32 streams measure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from deploy.checks.throughput import Level, rate
from deploy.errors import CheckFailed
from deploy.remote import http
from deploy.services.control import ServiceControl
from deploy.services.endpoint import endpoint_of_state
from deploy.services.probes import get, in_flight, post_generate
from deploy.services.state import ServiceState


@dataclass(frozen=True)
class LoadSpec:
    """The load one measurement sends (the gate step's arguments, as the service sees them)."""

    #: Taken in turn by the requests of a wave (several texts: a draft model is not judged
    #: on one).
    prompts: tuple[str, ...]
    max_new_tokens: int
    #: Seconds per request.
    timeout: float
    #: Requests sent first and not counted (at the highest level).
    warmup: int
    #: Waves per level (the median counts).
    samples: int
    #: The concurrencies measured, in order.
    levels: tuple[int, ...]

    @property
    def prompt(self) -> str:
        return self.prompts[0]


@dataclass(frozen=True)
class Answer:
    """One generation as the gate counts it."""

    tokens: int
    #: ``meta_info.spec_accept_length`` (EAGLE-3's accepted tokens per verify step), if any.
    accept_length: float | None = None
    #: Seconds to the first token (streamed requests).
    ttft: float | None = None
    #: Tokens per second after the first chunk (streamed requests).
    decode: float | None = None


def request_body(args: LoadSpec, index: int = 0) -> dict[str, object]:
    """The POST /generate body of the gate's request number ``index``."""
    return {
        "text": args.prompts[index % len(args.prompts)],
        "sampling_params": {
            "max_new_tokens": args.max_new_tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
    }


def generation(svc: ServiceControl, args: LoadSpec, index: int = 0) -> Answer:
    """One generation; the completion tokens the server reports and its acceptance length.

    Raises:
        CheckFailed: not a 200, or no ``meta_info.completion_tokens`` in the answer.
    """
    data, raw = post_generate(svc, request_body(args, index), args.timeout)
    try:
        meta = data["meta_info"]
        tokens = meta["completion_tokens"]
    except (KeyError, TypeError) as exc:
        raise CheckFailed(
            f"POST /generate gave no meta_info.completion_tokens: {raw[:200]!r}"
        ) from exc
    if type(tokens) is not int or tokens < 0:
        raise CheckFailed(f"POST /generate gave completion_tokens {tokens!r}, not a count")
    accept = meta.get("spec_accept_length") if isinstance(meta, dict) else None
    return Answer(tokens, float(accept) if isinstance(accept, int | float) else None)


def completion_tokens(svc: ServiceControl, args: LoadSpec) -> int:
    """One generation's completion tokens (`generation`)."""
    return generation(svc, args).tokens


def wave(svc: ServiceControl, args: LoadSpec, concurrency: int) -> tuple[float, list[Answer]]:
    """``concurrency`` requests at once, from the host: their completion tokens over the
    wave's wall time, and the answers."""
    return waves(svc, args, concurrency, 1)[0]


def waves(
    svc: ServiceControl, args: LoadSpec, concurrency: int, count: int, warmup: int = 0
) -> list[tuple[float, list[Answer]]]:
    """``count`` waves at ``concurrency`` (`deploy.services.loadgen`: on the host), after
    ``warmup`` uncounted requests.

    Raises:
        CheckFailed: a request failed or a wave generated no tokens.
    """
    from deploy.services.loadgen import run_waves

    bodies = [request_body(args, i) for i in range(len(args.prompts))]
    out = []
    for item in run_waves(
        svc, bodies, concurrency=concurrency, samples=count, timeout=args.timeout, warmup=warmup
    ):
        answers = [
            Answer(
                int(a["tokens"]),
                _number(a.get("accept")),
                _number(a.get("ttft")),
                _number(a.get("decode")),
            )
            for a in item["answers"]
        ]
        tokens = sum(answer.tokens for answer in answers)
        if tokens <= 0:
            raise CheckFailed("the load generated no tokens")
        out.append((rate(tokens, float(item["wall"])), answers))
    return out


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _level(concurrency: int, waves: list[tuple[float, list[Answer]]]) -> Level:
    answers = [a for _, wave_answers in waves for a in wave_answers]
    accepts = [a.accept_length for a in answers if a.accept_length]
    return Level(
        concurrency,
        tuple(speed for speed, _ in waves),
        sum(accepts) / len(accepts) if accepts else None,
        ttfts=tuple(a.ttft for a in answers if a.ttft is not None),
        decodes=tuple(a.decode for a in answers if a.decode is not None),
    )


def measure(
    svc: ServiceControl, args: LoadSpec, note: Callable[[str], None] | None = None
) -> list[Level]:
    """Warm up (uncounted), then ``samples`` waves at each level of ``args.levels``.

    Raises:
        CheckFailed: a request failed or the server reported no tokens.
    """
    levels = []
    for position, concurrency in enumerate(args.levels):
        if note:
            note(f"measuring {svc.name}: {args.samples} samples at concurrency {concurrency}")
        warmup = args.warmup if position == 0 else 0  # answers checked, not timed
        levels.append(_level(concurrency, waves(svc, args, concurrency, args.samples, warmup)))
    return levels


def more_samples(
    svc: ServiceControl,
    args: LoadSpec,
    levels: list[Level],
    which: set[int],
    count: int,
    note: Callable[[str], None] | None = None,
) -> list[Level]:
    """``levels`` with ``count`` more samples at each concurrency in ``which`` (a level the
    samples' spread left undecided); the others as they were."""
    out = []
    for level in levels:
        if level.concurrency not in which:
            out.append(level)
            continue
        if note:
            note(
                f"measuring {svc.name}: {count} more samples at concurrency "
                f"{level.concurrency} (the spread left it undecided)"
            )
        extra = _level(level.concurrency, waves(svc, args, level.concurrency, count))
        accepts = [a for a in (level.accept_length, extra.accept_length) if a is not None]
        out.append(
            Level(
                level.concurrency,
                level.samples + extra.samples,
                sum(accepts) / len(accepts) if accepts else None,
                ttfts=level.ttfts + extra.ttfts,
                decodes=level.decodes + extra.decodes,
            )
        )
    return out


def wait_idle(
    svc: ServiceControl, bound: float, note: Callable[[str], None] | None = None
) -> int | None:
    """Wait up to ``bound`` seconds for the server to have no request in flight
    (``/get_load``); the count left (0: idle; None: the server does not say)."""
    deadline = time.monotonic() + bound
    count = in_flight(svc)
    said = False
    while count and time.monotonic() < deadline:
        if note and not said:
            note(f"waiting up to {bound:g} s for {svc.name} to be idle: {count} in flight")
            said = True
        time.sleep(1.0)
        count = in_flight(svc)
    return count


def measure_baseline(
    svc: ServiceControl,
    state: ServiceState,
    args: LoadSpec,
    note: Callable[[str], None] | None = None,
    *,
    idle_wait: float = 60.0,
) -> tuple[list[Level] | None, str]:
    """The old server's figures for the gate to compare with, taken while it is idle:
    (levels, "") when measured so, (levels, "measured under load ...") when it stayed busy
    for ``idle_wait`` seconds, else (None, why not) — not running, not healthy, or a request
    failed."""
    if not state.running:
        return None, "old server was not running"
    svc.endpoint = endpoint_of_state(svc.spec, state)
    try:
        health = get(svc, svc.spec.health_path, timeout=30)
        if health.status != 200:
            return None, f"old server not healthy (HTTP {health.status})"
        busy = wait_idle(svc, idle_wait, note)
        if note:
            note(f"measuring {svc.name} before the first change (baseline)")
        levels = measure(svc, args, note)
    except (http.ServerUnavailable, CheckFailed) as exc:
        return None, f"old server could not be measured: {exc}"
    if busy:
        return levels, f"measured under load ({busy} requests in flight after {idle_wait:g} s)"
    return levels, ""
