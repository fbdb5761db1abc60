"""The throughput gate's load: run on the host by the load generator, measured per level.

Used twice per run: on the old server before the run's first change (the baseline,
`measure_baseline`, in the engine's "before the first change" phase) and on the new one
(`deploy.steps.gate_throughput`), with the same `LoadSpec`, so the two are comparable. The
arithmetic is `deploy.checks.throughput`.

The load is generated ON THE HOST (`deploy.services.loadgen`, one exec in the run's session per
batch of waves): 32 streams relayed through one SSH connection would measure the workstation
and its link, and a relayed request cannot tell when its first token came. Every request
streams, asks for exactly ``max_new_tokens`` with ``ignore_eos`` (a model that stops early on
one server and not on the other would otherwise decide the comparison) at temperature 0, with
the prompts in turn; the tokens counted are the server's own ``meta_info.completion_tokens``.
Before each wave the generator checks that no other client's requests run (`LoadSpec.idle_wait`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import interrupt
from deploy.checks.interpreter import root_only_if_trusted
from deploy.checks.throughput import Level
from deploy.errors import CheckFailed
from deploy.remote import http
from deploy.remote.host import quote
from deploy.services.control import ServiceControl
from deploy.services.endpoint import endpoint_of_state
from deploy.services.probes import get
from deploy.services.state import ServiceState

#: The generator's program text, run as ``python3 -I -S -c`` (standard library only).
LOADGEN_SOURCE = (Path(__file__).parent / "loadgen.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class LoadSpec:
    """The load one measurement sends (the gate step's arguments, as the service sees them)."""

    prompts: tuple[str, ...]
    max_new_tokens: int
    #: Seconds per request.
    timeout: float
    #: Requests sent first and not counted (in waves of the highest level).
    warmup: int
    #: Waves per level first.
    samples: int
    #: The concurrencies measured, in order.
    levels: tuple[int, ...]
    #: The most waves a level may take while the spread leaves it undecided (new server).
    max_samples: int = 0
    #: Waves per level on the old server: it cannot be measured again once it is replaced,
    #: so it gets the interval's other half at once (0: ``samples``).
    baseline_samples: int = 0
    #: Seconds, over one measurement, to wait for other clients' requests to finish.
    idle_wait: float = 0.0


@dataclass
class Measurement:
    """What one measurement of a server gave: its levels, the other clients' requests seen
    running beside it (None: the server could not say), and EAGLE-3's average acceptance
    length from its /server_info."""

    levels: list[Level]
    busy_max: int | None = None
    busy_source: str | None = None
    idle_waited: float = 0.0
    accept_length: float | None = None
    #: Waves that ran while other requests ran (after waiting out `LoadSpec.idle_wait`).
    busy_waves: int = 0

    def to_record(self) -> dict[str, Any]:
        """JSON-able, for the run's per-service facts."""
        return {
            "levels": [level.to_record() for level in self.levels],
            "busy_max": self.busy_max,
            "busy_source": self.busy_source,
            "idle_waited": self.idle_waited,
            "accept_length": self.accept_length,
            "busy_waves": self.busy_waves,
        }

    @classmethod
    def from_record(cls, record: object) -> Measurement | None:
        """A measurement recorded by `to_record`; None when ``record`` holds none."""
        if not isinstance(record, Mapping):
            return None
        try:
            levels = [Level.from_record(r) for r in record["levels"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if not levels:
            return None
        return cls(
            levels,
            record.get("busy_max"),
            record.get("busy_source"),
            float(record.get("idle_waited") or 0.0),
            record.get("accept_length"),
            int(record.get("busy_waves") or 0),
        )

    def merged(self, more: Measurement) -> Measurement:
        """This measurement with ``more``'s waves added to the same levels."""
        extra = {level.concurrency: level for level in more.levels}
        levels = [
            level.joined(extra[level.concurrency]) if level.concurrency in extra else level
            for level in self.levels
        ]
        busy = [b for b in (self.busy_max, more.busy_max) if b is not None]
        return Measurement(
            levels,
            max(busy) if busy else None,
            self.busy_source or more.busy_source,
            self.idle_waited + more.idle_waited,
            more.accept_length if more.accept_length is not None else self.accept_length,
            self.busy_waves + more.busy_waves,
        )


def generator_input(
    svc: ServiceControl, args: LoadSpec, plan: Sequence[tuple[int, int]], *, warmup: int
) -> dict[str, Any]:
    """What the generator reads on stdin (the API key among it: never on a command line)."""
    where = svc.endpoint
    return {
        "address": where.address,
        "port": where.port,
        "headers": where.headers(),
        "prompts": list(args.prompts),
        "max_new_tokens": args.max_new_tokens,
        "timeout": args.timeout,
        "warmup": warmup,
        "plan": [list(item) for item in plan],
        "idle_wait": args.idle_wait,
    }


def run_generator(
    svc: ServiceControl, args: LoadSpec, plan: Sequence[tuple[int, int]], *, warmup: int
) -> Measurement:
    """Run the load generator on the host for ``plan`` ([(concurrency, waves)]).

    Raises:
        CheckFailed: a request failed, or the generator gave no answer.
        Interrupted: the run was interrupted before it (`deploy.interrupt`).
    """
    interrupt.check()
    python = svc.spec.agent_python
    command = root_only_if_trusted(python, f"{quote(python)} -I -S -c {quote(LOADGEN_SOURCE)}")
    waves = warmup + sum(count for _, count in plan)
    stdin = json.dumps(generator_input(svc, args, plan, warmup=warmup)).encode()
    result = svc.remote.run(command, stdin=stdin, timeout=args.timeout * (waves + 2) + 60)
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        answer = None
    if not result.ok or not isinstance(answer, dict):
        why = result.tail(3) or f"exit {result.exit_status}"
        raise CheckFailed(f"the load generator on {svc.remote.name} ({python}) failed: {why}")
    if answer.get("error"):
        raise CheckFailed(f"load on {svc.name}: {answer['error']}")
    levels = [Level.from_waves(item["concurrency"], item["waves"]) for item in answer["levels"]]
    if not levels or any(sum(level.e2e) <= 0 for level in levels):
        raise CheckFailed("the load generated no tokens")
    busy_waves = sum(
        1 for item in answer["levels"] for wave in item["waves"] if (wave.get("busy") or 0) > 0
    )
    return Measurement(
        levels,
        answer.get("busy_max"),
        answer.get("busy_source"),
        float(answer.get("idle_waited") or 0.0),
        answer.get("avg_spec_accept_length"),
        busy_waves,
    )


def measure(
    svc: ServiceControl,
    args: LoadSpec,
    note: Callable[[str], None] | None = None,
    *,
    baseline: bool = False,
) -> Measurement:
    """Warm up (uncounted), then ``samples`` waves (``baseline_samples`` for the
    ``baseline``) at each level of ``args.levels``.

    Raises:
        CheckFailed: a request failed or the server reported no tokens.
    """
    count = max(args.samples, args.baseline_samples) if baseline else args.samples
    if note:
        levels = " and ".join(str(c) for c in args.levels)
        note(f"measuring {svc.name}: {count} samples at concurrency {levels}, on the host")
    plan = [(c, count) for c in args.levels]
    return run_generator(svc, args, plan, warmup=args.warmup)


def measure_more(
    svc: ServiceControl,
    args: LoadSpec,
    plan: Sequence[tuple[int, int]],
    note: Callable[[str], None] | None = None,
) -> Measurement:
    """More waves, ``plan`` [(concurrency, waves)], for levels the spread left undecided (no
    warm-up: the server is warm)."""
    if note:
        which = ", ".join(f"{count} at concurrency {c}" for c, count in plan)
        note(f"measuring {svc.name}: more samples where undecided: {which}")
    return run_generator(svc, args, plan, warmup=0)


def measure_baseline(
    svc: ServiceControl,
    state: ServiceState,
    args: LoadSpec,
    note: Callable[[str], None] | None = None,
) -> tuple[Measurement | None, str]:
    """The old server's figures for the gate to compare with: (measurement, "") when
    measured, else (None, why not) — not running, not healthy, or a request failed."""
    if not state.running:
        return None, "old server was not running"
    svc.endpoint = endpoint_of_state(svc.spec, state)
    try:
        health = get(svc, svc.spec.health_path, timeout=30)
        if health.status != 200:
            return None, f"old server not healthy (HTTP {health.status})"
        if note:
            note(f"measuring {svc.name} before the first change (baseline)")
        return measure(svc, args, note, baseline=True), ""
    except (http.ServerUnavailable, CheckFailed) as exc:
        return None, f"old server could not be measured: {exc}"
