"""Running one fault: start `deploy`, let the proxy fire at a boundary, then the next command.

Kept apart from the test modules so that the file part and the service part of the matrix
share one definition of "consistent" and "truthful" (see `judge`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.faults.conftest import FILES_ONLY, LEDGER, FaultHost, Record, exit_matches

Trigger = Callable[[FaultHost], bool]


@dataclass
class Boundary:
    """A named moment of a run, as a predicate over the host's disk."""

    name: str
    when: Trigger
    extra_bytes: int = 0


def journal_at_least(lines: int) -> Trigger:
    return lambda host: host.journal_lines() >= lines


def lock_taken(host: FaultHost) -> bool:
    lock = host.state_dir / "lock"
    return lock.exists() and lock.stat().st_mtime > host.armed_at


def copy_in_flight(host: FaultHost) -> bool:
    return any(
        p.name.endswith(".tmp")
        for run in set(host.runs()) - host.old_runs
        for p in (host.state_dir / "runs" / run / "files").glob("*")
    )


def target_in_flight(host: FaultHost) -> bool:
    return any(".deploy-" in p.name for p in host.model_file.parent.iterdir())


#: The file part of kimi-eagle3 (backup, python_insert, verify_python, verify_tail): its journal
#: is begin, backup, intent, done, end. Each boundary is the instant after that line is on disk.
FILE_BOUNDARIES = [
    Boundary("lock taken, nothing written", lock_taken),
    Boundary("after journal begin", journal_at_least(1)),
    Boundary("saved copy in flight", copy_in_flight, extra_bytes=4096),
    Boundary("after backup recorded", journal_at_least(2)),
    Boundary("after write intent", journal_at_least(3)),
    Boundary("new file in flight", target_in_flight, extra_bytes=4096),
    Boundary("after write done", journal_at_least(4)),
    Boundary("after end", journal_at_least(5)),
]


@dataclass
class Outcome:
    """What a command said, and (for the faulted run) what was true right after it."""

    exit_code: int
    outcome: str
    output: str
    state_after: str = ""
    service_after: str = ""
    unfinished_after: bool = False


def faulted_apply(
    host: FaultHost,
    fault: str,
    boundary: Boundary,
    args: tuple[str, ...] = FILES_ONLY,
) -> Outcome:
    """Run ``deploy apply kimi-eagle3`` and inject ``fault`` ("cut" or "kill") at ``boundary``."""
    process: dict[str, subprocess.Popen[str]] = {}

    def kill() -> None:
        os.kill(process["p"].pid, signal.SIGKILL)

    host.old_runs = set(host.runs())
    host.armed_at = time.time()
    host.seen_at.clear()
    host.proxy.arm(
        lambda: boundary.when(host),
        action=kill if fault == "kill" else None,
        extra_bytes=boundary.extra_bytes,
    )
    process["p"] = host.deploy.popen("apply", "kimi-eagle3", *args, "--yes", "--json")
    out, err = process["p"].communicate(timeout=180)
    host.proxy.disarm()
    assert host.proxy.fired.is_set(), f"the fault never fired at {boundary.name!r}:\n{out}{err}"
    outcome = "killed"
    with_report = out.strip()
    if with_report.startswith("{"):
        hosts = json.loads(with_report).get("hosts", [])
        outcome = hosts[0]["outcome"] if hosts else "?"
    return Outcome(
        process["p"].returncode,
        outcome,
        out + err,
        host.file_state(),
        host.service_state(),
        unfinished_now(host),
    )


def unfinished_now(host: FaultHost) -> bool:
    """Whether the host's newest journal lacks its final line (read from disk, not deploy)."""
    events = host.journal_events()
    return bool(events) and events[-1] not in ("end", "rollback_end")


def judge(
    host: FaultHost,
    fault: str,
    point: str,
    fault_result: Outcome,
    next_command: str,
    next_result: Outcome,
    *,
    expect: str,
    status_truthful: bool,
) -> Record:
    """Check the host after the fault and the next command; record and return the verdict."""
    state, service = host.file_state(), host.service_state()
    strays = host.stray_files()
    pairs_ok = {("before", "old"), ("after", "new"), ("before", "n/a"), ("after", "n/a")}
    consistent = (
        (state, service) in pairs_ok
        and state == expect
        and not strays
        and not unfinished_now(host)
        and (service == "n/a" or host.healthy())
    )
    fault_truthful = fault == "kill" or exit_matches(
        fault_result.exit_code,
        fault_result.state_after,
        fault_result.service_after,
        left_unfinished=fault_result.unfinished_after,
    )
    next_truthful = next_result.exit_code == 0 and consistent
    notes = []
    if strays:
        notes.append(f"left {strays}")
    if not status_truthful:
        notes.append("status did not report the unfinished run")
    record = Record(
        fault=fault,
        point=point,
        next_command=next_command,
        fault_exit=fault_result.exit_code,
        fault_outcome=fault_result.outcome,
        next_exit=next_result.exit_code,
        file_state=state,
        service_state=service,
        consistent=consistent,
        truthful=fault_truthful and next_truthful and status_truthful,
        bytes_lost=host.bytes_lost(),
        note="; ".join(notes),
    )
    LEDGER.add(record)
    return record
