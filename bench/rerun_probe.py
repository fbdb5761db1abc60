"""``python -m bench.rerun_probe``: why is deploy's no-change re-run at N = 1 not faster?

On one sandbox host, ``--rounds`` times: reset, a change run, a no-change re-run, the floor —
interleaved, so load drifts hit all three alike. For every process it records:

- wall time (fork to exit);
- the client's CPU (user + system, from ``RUSAGE_CHILDREN`` around the process);
- the host's CPU: the sshd daemon's own and its reaped children's CPU (``/proc/PID/stat``
  utime + stime + cutime + cstime: every session, login shell and interpreter the run started
  on the host was reaped into it by the time the run ended);

- the delayed ACKs TCP sent meanwhile (``/proc/net/netstat``; a clean count when the probe
  runs in its own network namespace:
  ``unshare -n sh -c 'ip link set lo up && python -m bench.rerun_probe'``);

then, with ``--profile K``, K instrumented runs of each kind (`bench.profile`) and the median
of every span, so that a phase that is slower in the re-run stands out. Prints one table per
view on stdout (markdown). Loopback only, like the rest of the bench.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.deploybuild import REPO, deploy_executable, ensure_bytecode
from bench.fleet import Fleet, start_fleet
from bench.runner import run
from bench.tools import Command, DeployTool, FloorTool
from bench.workload import PLAYBOOK
from deploy.sandbox.sshd import SshdSandbox
from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

TICK = os.sysconf("SC_CLK_TCK")


def host_cpu(pid: int) -> float:
    """CPU-seconds of the daemon ``pid`` and every child it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # after the command name: state(3) ... utime(14) stime(15) cutime(16) cstime(17)
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def delayed_acks() -> int:
    """Delayed ACKs this network namespace's TCP sent so far (``TcpExt: DelayedACKs``).

    Counted per namespace: run the probe inside its own (``unshare -n``, loopback up) and
    the count is this probe's alone, whatever else the machine runs.
    """
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table.get("DelayedACKs", 0))
    return 0


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    command: Command, daemon: int, settle: float
) -> tuple[float, float, float, float, int, int]:
    """(wall, client CPU, host CPU, host CPU after the process exited, delayed ACKs sent
    while it ran, exit status).

    The host's CPU is read ``settle`` s after the process ended (the daemon reaps the session
    it forked only once sshd's teardown is done): what it used after the client was gone is
    the teardown tail that a process started right away competes with.
    """
    cpu, host, acks = client_cpu(), host_cpu(daemon), delayed_acks()
    outcome = run(command)
    at_exit, acked = host_cpu(daemon), delayed_acks()
    time.sleep(settle)
    after = host_cpu(daemon)
    return (
        outcome.seconds,
        client_cpu() - cpu,
        after - host,
        after - at_exit,
        acked - acks,
        outcome.exit_status,
    )


def profiled(fleet: Fleet, deploy: DeployTool) -> dict[str, float]:
    """Span label -> total seconds in one instrumented run (labels repeated are summed)."""
    args = deploy.command(fleet, 1).argv[len(deploy.executable) :]
    command = Command(
        [sys.executable, "-m", "bench.profile", str(fleet.workdir), *args], REPO, fleet.env()
    )
    outcome = run(command)
    document = json.loads(outcome.stdout.strip().splitlines()[-1])
    totals: dict[str, float] = defaultdict(float)
    for _, label, start, end in document["spans"]:
        if not label.startswith("cpu: ast"):
            totals[label] += end - start
    totals["(process wall)"] = outcome.seconds
    return totals


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f}" if values else "—"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rerun_probe")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", type=int, default=5)
    options = parser.parse_args(argv)
    ensure_bytecode()
    playbook = REPO / "playbooks" / f"{PLAYBOOK}.yaml"
    deploy = DeployTool(deploy_executable(), playbook)
    floor = FloorTool(sys.executable)
    base = Path(tempfile.mkdtemp(prefix="deploy-probe-"))
    samples: dict[str, list[tuple[float, float, float, float, int]]] = defaultdict(list)
    spans: dict[str, dict[str, list[float]]] = {"change": defaultdict(list), "rerun": {}}
    spans["rerun"] = defaultdict(list)
    with SshdSandbox(base / "sandbox") as sandbox:
        fleet = start_fleet(sandbox, 1, kimi_k25_source(PATCH_NEEDED), REPO, base / "ws")
        floor.prepare(fleet, 1)
        process = fleet.hosts[0]._process
        assert process is not None
        daemon = process.pid
        for round_ in range(options.rounds + 1):  # round 0 warms the caches, untimed
            fleet.reset()
            # As the bench runs them (each process right after the previous one), then a
            # re-run started only once the host has been quiet for a second.
            runs = [
                ("change", deploy.command(fleet, 1), 0.0),
                ("rerun, right after the change run", deploy.command(fleet, 1), 1.0),
                ("rerun, after 1 s of quiet", deploy.command(fleet, 1), 0.0),
                ("floor", floor.command(fleet, 1), 0.0),
            ]
            for kind, command, settle in runs:
                wall, cpu, host, tail, acks, status = timed(command, daemon, max(settle, 0.05))
                if status != 0:
                    print(f"{kind}: exit status {status}", file=sys.stderr)
                if round_:
                    samples[kind].append((wall, cpu, host, tail, acks))
        for _ in range(options.profile):
            fleet.reset()
            for kind in ("change", "rerun"):
                for label, seconds in profiled(fleet, deploy).items():
                    spans[kind][label].append(seconds)
    print(f"## {options.rounds} interleaved rounds, N = 1, loopback (medians, ms)\n")
    print(
        "| run | wall | client CPU | host CPU (sshd + children) | of which after exit "
        "| delayed ACKs (mean) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, values in samples.items():
        walls, cpus, hosts, tails = (list(v[i] for v in values) for i in range(4))
        mean_acks = statistics.mean(float(v[4]) for v in values)
        print(
            f"| {kind} | {_ms(walls)} | {_ms(cpus)} | {_ms(hosts)} | {_ms(tails)} "
            f"| {mean_acks:.1f} |"
        )
    print(f"\n## {options.profile} profiled runs of each kind: median ms per span\n")
    print("| span | change run | re-run |")
    print("| --- | --- | --- |")
    labels = sorted(
        set(spans["change"]) | set(spans["rerun"]),
        key=lambda label: -statistics.median(spans["change"].get(label) or [0.0]),
    )
    for label in labels:
        print(
            f"| {label} | {_ms(spans['change'].get(label, []))} | {_ms(spans['rerun'].get(label, []))} |"
        )
    print(f"\nload average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
