"""The fault matrix over the service part of kimi-eagle3: after the stop, after the start,
during the readiness wait — cut or SIGKILL, then the next command.

The oracle is the kernel: which command line listens on the service port (EAGLE-3 flags = the
new server) and whether it answers ``/health_generate``; with the model file's sha256 the pair
must be (before, old) or (after, new) — never a new file with the old server, or no server.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.faults.conftest import FaultHost
from tests.faults.harness import Boundary, faulted_apply, journal_at_least, judge_next_command


def _events(host: FaultHost) -> list[dict[str, object]]:
    """The complete records of the newest run's journal (a line being written is skipped)."""
    journals = sorted(
        (host.state_dir / "runs" / run / "journal.jsonl")
        for run in set(host.runs()) - host.old_runs
    )
    if not journals:
        return []
    records = []
    for line in journals[-1].read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _stopped(host: FaultHost) -> bool:
    """The service intent is journaled and nothing listens on the port any more."""
    assert host.gpu is not None
    return any(e.get("op") == "service" for e in _events(host)) and (host.service_state() == "down")


def _service_done(host: FaultHost) -> bool:
    return any(e.get("event") == "done" and e.get("op") == "service" for e in _events(host))


def _during_wait(host: FaultHost) -> bool:
    """Half a second into wait_healthy: the new server is loading (connection refused)."""
    if not _service_done(host):
        return False
    first = host.seen_at.setdefault("service done", time.monotonic())
    return time.monotonic() - first > 0.5


SERVICE_BOUNDARIES = [
    Boundary("after files, before the restart", journal_at_least(4)),
    Boundary("after the stop, before the start", _stopped),
    Boundary("after the start", _service_done),
    Boundary("during the readiness wait", _during_wait),
]
CASES = [
    pytest.param(
        fault,
        boundary,
        nxt,
        id=f"{fault}-{boundary.name}-then-{nxt}",
        # CI: one fault per boundary, alternating; the report: both at every boundary.
        marks=[pytest.mark.slow] if (position + (fault == "kill")) % 2 else [],
    )
    for position, boundary in enumerate(SERVICE_BOUNDARIES)
    for fault, nxt in (("cut", "rollback"), ("kill", "apply"))
]


@pytest.mark.parametrize(("fault", "boundary", "next_command"), CASES)
def test_service_fault(make_fault_host, fault: str, boundary: Boundary, next_command: str) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host(service=True, load_seconds=2.0)
    faulted = faulted_apply(host, fault, boundary, args=())
    assert faulted.state_after in ("before", "after"), "the file is never half-written"
    record, next_output = judge_next_command(
        host,
        fault,
        f"service: {boundary.name}",
        faulted,
        next_command,
        args=(),
        status_truthful=True,
    )
    assert record.bytes_lost == 0
    assert record.consistent, f"{record}\nfault:\n{faulted.output[-2000:]}\nnext:\n{next_output}"
    assert record.truthful, f"{record}\nfault:\n{faulted.output[-2000:]}\nnext:\n{next_output}"
