"""Running one fault: start `deploy`, let the proxy fire at a boundary, then the next command.

Kept apart from the test modules so that the file part and the service part of the matrix
share one definition of "consistent" and "truthful" (see `judge`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.conftest import FILES_ONLY, LEDGER, FaultHost, Record, exit_matches

Trigger = Callable[[FaultHost], bool]


@dataclass
class HelperStop:
    """A point inside the host's file helper: the ``nth`` request ``op`` on a path matching
    ``path`` (fnmatch; ``{state_dir}`` and ``{model_file}`` filled in), after ``after_bytes`` of
    its payload reached the helper (`deploy.hostpy.fileagent._fault_stop`).

    Since the write path is pipelined, nothing on the host's disk marks "this request is half
    received": a request is read whole, then written in microseconds. So the helper stops
    itself there and says so in a marker; the fault is injected while it is stopped, and the
    helper is then killed, so the rest of the request is lost with the connection, however much
    of it the pipes and sshd had buffered.
    """

    op: str
    path: str
    nth: int = 1
    after_bytes: int = 0

    def rule(self, host: FaultHost, marker: Path) -> dict[str, object]:
        path = self.path.format(state_dir=host.state_dir, model_file=host.model_file)
        return {
            "op": self.op,
            "path": path,
            "nth": self.nth,
            "after_bytes": self.after_bytes,
            "marker": str(marker),
        }


@dataclass
class Boundary:
    """A named moment of a run: a predicate over the host's disk, or a stop in the helper."""

    name: str
    when: Trigger | None
    extra_bytes: int = 0
    helper: HelperStop | None = None


def journal_at_least(lines: int) -> Trigger:
    return lambda host: host.journal_lines() >= lines


def lock_taken(host: FaultHost) -> bool:
    lock = host.state_dir / "lock"
    return lock.exists() and lock.stat().st_mtime > host.armed_at


#: The file part of kimi-eagle3 (backup, python_insert, verify_python, verify_tail): its journal
#: is begin, backup, intent, done, end. Each boundary is the instant after that line is on disk.
FILE_BOUNDARIES = [
    Boundary("lock taken, nothing written", lock_taken),
    Boundary("after journal begin", journal_at_least(1)),
    # The saved copy is made by the helper from the file itself (a spliced write: no payload),
    # so the helper stops with the request received and not yet served.
    Boundary(
        "saved copy received, not made",
        None,
        helper=HelperStop("write", "{state_dir}/runs/*/files/*", after_bytes=0),
    ),
    Boundary("after backup recorded", journal_at_least(2)),
    Boundary("after write intent", journal_at_least(3)),
    # The write sends the stretch the edit changed (~1.2 kB of the 28 kB file): half of it.
    Boundary(
        "new file half received",
        None,
        helper=HelperStop("write", "{model_file}", after_bytes=512),
    ),
    # The end record goes in the same batch as the writes and the compile check (issue 17:
    # deploy/engine/verdicts.py), so no request of the client's follows the done line before
    # the answers: the helper stops inside the end record's request instead.
    Boundary(
        "after write done",
        None,
        helper=HelperStop("append", "{state_dir}/runs/*/journal.jsonl", nth=5, after_bytes=16),
    ),
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
    if boundary.helper is not None:
        with helper_stopped(host, boundary.helper, fault, process) as stopped:
            process["p"] = host.deploy.popen("apply", "kimi-eagle3", *args, "--yes", "--json")
            out, err = process["p"].communicate(timeout=180)
        assert stopped, f"the helper never stopped at {boundary.name!r}:\n{out}{err}"
        half = 0 < stopped["received"] < stopped["total"]
        assert half or stopped["total"] == 0, f"not half received: {stopped}"
        # the half-received write never happened: the saved copy is not there, or the target
        # still holds the original (the test's own reading of the disk, not deploy's word)
        if stopped["path"] == str(host.model_file):
            assert host.file_state() == "before", f"a half-received write landed: {stopped}"
        elif stopped["op"] == "append":
            journal = Path(stopped["path"]).read_bytes()
            whole = journal.endswith(b"\n") and journal.count(b"\n") == stopped["journal_lines"]
            assert whole, f"a half-received record landed: {stopped}"
        else:
            assert not Path(stopped["path"]).exists(), f"a half-received copy landed: {stopped}"
    else:
        assert boundary.when is not None
        when = boundary.when
        host.proxy.arm(
            lambda: when(host),
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


@contextlib.contextmanager
def helper_stopped(
    host: FaultHost,
    stop: HelperStop,
    fault: str,
    process: dict[str, subprocess.Popen[str]],
) -> Iterator[dict[str, Any]]:
    """Arm ``stop`` in the host's file helper; when it stops there, inject ``fault``.

    Yields a dict that is filled, once the helper stopped, with what it had received (its
    marker) and ``journal_lines``: the complete journal lines on disk at that instant. The
    fault comes first (the proxy resets the connection, or the deploy process is SIGKILLed),
    then the stopped helper is SIGKILLed: the host keeps exactly the part of the request that
    had reached the helper, as when the link dies mid-transfer.
    """

    def inject(seen: dict[str, Any]) -> dict[str, Any]:
        journal = host.journal_lines()
        if fault == "cut":
            host.proxy.cut()
        else:
            os.kill(process["p"].pid, signal.SIGKILL)
        os.kill(seen["pid"], signal.SIGKILL)
        return {"journal_lines": journal}

    with helper_stop_armed(host, stop, inject) as stopped:
        yield stopped


@contextlib.contextmanager
def helper_stop_armed(
    host: FaultHost,
    stop: HelperStop,
    act: Callable[[dict[str, Any]], dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """Arm ``stop`` in the host's file helper for one command; when the helper stops there,
    call ``act`` with its marker (from a watcher thread, while the helper is stopped).

    Yields a dict that is filled, once ``act`` returned, with the marker and what ``act``
    returned. ``act`` decides what the fault is and what becomes of the stopped helper
    (`helper_stopped`: a cut or a kill, then the helper killed). The rule is removed as soon
    as the helper stopped, so that the next command's helper does not see it.
    """
    assert host.helper_rule is not None
    marker = host.helper_rule.with_name("helper-stopped.json")
    marker.unlink(missing_ok=True)
    host.helper_rule.write_text(json.dumps(stop.rule(host, marker)))
    stopped: dict[str, Any] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if marker.exists():
                seen = json.loads(marker.read_text())
                # the rule is for this run only: the next command's helper must not see it
                host.helper_rule.unlink(missing_ok=True)  # type: ignore[union-attr]
                stopped.update(seen, **act(seen))
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, name="helper-stop", daemon=True)
    watcher.start()
    try:
        yield stopped
    finally:
        done.set()
        watcher.join(timeout=10)
        host.helper_rule.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)


def unfinished_now(host: FaultHost) -> bool:
    """Whether the host's newest journal lacks its final line (read from disk, not deploy)."""
    events = host.journal_events()
    return bool(events) and events[-1] not in ("end", "rollback_end")


def judge_next_command(
    host: FaultHost,
    fault: str,
    point: str,
    faulted: Outcome,
    next_command: str,
    *,
    args: tuple[str, ...] = FILES_ONLY,
    status_truthful: bool,
) -> tuple[Record, str]:
    """Run the command an operator runs after the fault, then `judge` the host.

    ``apply`` (kimi-eagle3 with ``args``) must leave the file changed, ``rollback`` as it was
    before. Returns the verdict and what the next command printed.
    """
    if next_command == "apply":
        result = host.deploy("apply", "kimi-eagle3", *args, "--yes")
        expect = "after"
    else:
        result = host.deploy("rollback", "--yes")
        expect = "before"
    record = judge(
        host,
        fault,
        point,
        faulted,
        next_command,
        Outcome(result.exit_code, "", result.output),
        expect=expect,
        status_truthful=status_truthful,
    )
    return record, result.output


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
