"""What the bench measures of ``deploy`` alone, after the timed rounds of a fleet size.

Its SSH operation counts (``--json``), one instrumented run of each kind (`bench.profile`),
every SSH message of one run of each kind through the delay proxy (`bench.wire`), and the
start-up of the commands that contact no host. Each fills its part of `Results`; a failure
becomes a note on the page, never a crash of the whole bench.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import wire
from bench.delay import ping_pong
from bench.deploybuild import REPO
from bench.fleet import Fleet
from bench.results import Results
from bench.runner import Series, run
from bench.tools import Command, DeployTool

CLI_REPEAT = 10


def check_delay(rtts: list[int], results: Results) -> None:
    """A ping-pong through the proxy must take at least each RTT asked for (else the bench
    measures nothing): the measured values go into the report.

    Raises:
        OSError: the proxy adds less than the RTT.
    """
    measured = []
    for rtt in rtts:
        if rtt == 0:
            continue
        seconds = ping_pong(rtt)
        if seconds < rtt / 1000:
            raise OSError(f"the delay proxy's ping-pong took {seconds * 1000:.1f} ms < {rtt} ms")
        measured.append(f"{rtt} ms → {seconds * 1000:.1f} ms")
    if measured:
        results.notes.append(
            "the delay proxy (`bench/delay.py`, listening on 127.0.0.1 only) was checked "
            "before timing: a one-byte ping-pong through it took (fastest of 3) "
            + ", ".join(measured)
        )


def op_counts(deploy: DeployTool, fleet: Fleet, count: int, results: Results) -> None:
    """deploy's own per-host operation counts for a change run and a re-run (``--json``)."""
    fleet.reset()
    for kind in ("change", "rerun"):
        outcome = run(deploy.json_command(fleet, count))
        try:
            report = json.loads(outcome.stdout)
            results.ops[(count, kind)] = [
                {"host": h["host"], "outcome": h["outcome"], **h.get("ops", {})}
                for h in report["hosts"]
            ]
        except (ValueError, KeyError, TypeError):
            results.notes.append(
                f"N={count} {kind}: no ops from `deploy --json` ({outcome.reason()})"
            )


def profile(deploy: DeployTool, fleet: Fleet, count: int, results: Results) -> None:
    """One instrumented deploy run of each kind (see bench/profile.py), with its wall time."""
    fleet.reset()
    for kind in ("change", "rerun"):
        args = deploy.command(fleet, count).argv[len(deploy.executable) :]
        command = Command(
            [sys.executable, "-m", "bench.profile", str(fleet.workdir), *args], REPO, fleet.env()
        )
        outcome = run(command)
        try:
            document: dict[str, Any] = json.loads(outcome.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results.notes.append(f"N={count} {kind}: profile failed ({outcome.reason()})")
            continue
        document["wall"] = outcome.seconds
        results.profiles[(count, kind)] = document


def wire_probe(fleet: Fleet, rtt: float, base: Path, results: Results) -> None:
    """Every SSH message of one run of each kind on one host at ``rtt`` (`bench.wire`)."""
    try:
        results.wire = wire.probe(fleet, rtt, base, results.initial_window)
        results.wire_rtt = rtt
    except (OSError, ValueError) as exc:
        results.notes.append(f"no SSH message log at RTT {rtt:g} ms: {exc}")


def cli_times(deploy: DeployTool, fleet: Fleet, results: Results) -> None:
    """``deploy --help`` and ``deploy validate``: start-up cost, no host contacted."""
    for label, args in (("--help", ["--help"]), ("validate", ["validate", "-i", "hosts.yaml"])):
        series = Series("deploy", 0, label)
        for _ in range(CLI_REPEAT):
            command = Command([*deploy.executable, *args], fleet.workdir, fleet.env())
            outcome = run(command, timeout=60)
            series.seconds.append(outcome.seconds)
            if outcome.exit_status != 0:
                series.failures.append(f"exit status {outcome.exit_status}: {outcome.reason()}")
        results.cli[label] = series
