"""``python -m bench --ablate``: each speed mechanism switched off against all of them on.

For each fleet size and round-trip time, ``--repeat`` rounds; in every round the same deploy
change run and no-change re-run with everything on (``all on``), with each mechanism of
`deploy.ablation.MECHANISMS` off in turn (``DEPLOY_ABLATE=name``), and the floor: the order
rotates from round to round, so that a slow minute of the shared machine falls on a different
variant each time. Each run records its wall time, the CPU-seconds of the client process
(``RUSAGE_CHILDREN`` around it: the deploy process, nothing of the hosts) and, through the
delay proxy, the bytes it carried. A variant's effect in a cell is the median, over rounds, of
its time divided by the all-on time of the same round; the spread is the range of those
ratios. At N = 1 every variant's SSH messages are logged three times more through a
``--trip-rtt`` link (400 ms: far longer than a stall of a loaded client; `bench.wire`): round
trips are counted, not timed, so they do not depend on the load. ``--repeat 0``: only those.

Writes a markdown section and the raw figures as JSON (``--out``).
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
from dataclasses import dataclass, field
from pathlib import Path

from bench.delay import DelayNetwork
from bench.deploybuild import REPO, ensure_bytecode
from bench.fleet import Fleet, start_fleet, through
from bench.markdown import table
from bench.runner import Outcome, change_wrong, run
from bench.tools import Command, DeployTool, FloorTool
from bench.window import INITIAL_SEGMENTS
from bench.wire import _LOG_ENV, waits
from bench.workload import PLAYBOOK
from deploy.ablation import MECHANISMS

ALL_ON = "all on"


@dataclass
class Run:
    seconds: float
    cpu: float
    up: int = 0
    down: int = 0


@dataclass
class Cell:
    """Every run of one (hosts, rtt): variant -> kind -> one `Run` per round."""

    hosts: int
    rtt: int
    runs: dict[str, dict[str, list[Run]]] = field(default_factory=dict)

    def add(self, variant: str, kind: str, found: Run) -> None:
        self.runs.setdefault(variant, {}).setdefault(kind, []).append(found)

    def ratios(self, variant: str, kind: str, what: str = "seconds") -> list[float]:
        mine, base = self.runs.get(variant, {}).get(kind, []), self.runs[ALL_ON].get(kind, [])
        return [getattr(a, what) / getattr(b, what) for a, b in zip(mine, base, strict=False)]


def _timed(command: Command, variant: str, net: DelayNetwork | None) -> tuple[Outcome, Run]:
    env = dict(command.env)
    if variant not in (ALL_ON, "floor"):
        env["DEPLOY_ABLATE"] = variant
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    carried = dict(net.carried) if net is not None else {"up": 0, "down": 0}
    outcome = run(Command(command.argv, command.cwd, env))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    now = net.carried if net is not None else {"up": 0, "down": 0}
    return outcome, Run(
        outcome.seconds, cpu, now["up"] - carried["up"], now["down"] - carried["down"]
    )


def _variant(
    cell: Cell, fleet: Fleet, deploy: DeployTool, variant: str, net: DelayNetwork | None
) -> None:
    fleet.reset()
    count = len(fleet.hosts)
    outcome, found = _timed(deploy.command(fleet, count), variant, net)
    if outcome.exit_status != 0 or change_wrong(deploy, fleet):
        raise RuntimeError(f"{variant} change run failed: {outcome.reason()}")
    cell.add(variant, "change", found)
    outcome, found = _timed(deploy.command(fleet, count), variant, net)
    if outcome.exit_status != 0:
        raise RuntimeError(f"{variant} re-run failed: {outcome.reason()}")
    cell.add(variant, "rerun", found)


def _rounds(
    cell: Cell,
    fleet: Fleet,
    deploy: DeployTool,
    floor: FloorTool,
    variants: list[str],
    repeat: int,
    net: DelayNetwork | None,
) -> None:
    floor.prepare(fleet, len(fleet.hosts))
    for round_ in range(repeat):
        shift = round_ % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            _variant(cell, fleet, deploy, variant, net)
        _, found = _timed(floor.command(fleet, len(fleet.hosts)), "floor", net)
        cell.add("floor", "connect", found)
        print(
            f"ablate: N={cell.hosts} RTT={cell.rtt} round {round_ + 1}/{repeat} done",
            file=sys.stderr,
            flush=True,
        )


def _round_trips(
    direct: Fleet, deploy: DeployTool, variants: list[str], rtt: int, base: Path, repeat: int = 3
) -> dict[str, dict[str, str]]:
    """Variant -> kind -> waits on the wire (`bench.wire`) and process seconds, one host at
    ``rtt``, ``repeat`` runs each: ``waits a/b/c, median s [min–max]``. At a long RTT a round
    trip (waited or caused by a burst over the congestion window) outweighs the machine's
    noise in the process time."""
    counts: dict[tuple[str, str], list[int]] = {}
    seconds: dict[tuple[str, str], list[float]] = {}
    with DelayNetwork(rtt, INITIAL_SEGMENTS) as net:
        first = direct.hosts[0]
        single = Fleet(direct.sandbox, [first], direct.workdir, direct.original, direct.python)
        fleet = through(single, {first.name: net.forward(first.port)}, base / "wire", REPO)
        for variant, _ in [(v, a) for a in range(repeat) for v in variants]:
            direct.reset()
            for kind in ("change", "rerun"):
                log = base / f"wire-{variant.replace(' ', '_')}-{kind}.jsonl"
                log.unlink(missing_ok=True)
                command = deploy.command(fleet, 1)
                env = {**command.env, _LOG_ENV: str(log), "PYTHONPATH": str(REPO)}
                if variant != ALL_ON:
                    env["DEPLOY_ABLATE"] = variant
                argv = [sys.executable, "-m", "bench.wire", "--child", *command.argv[1:]]
                outcome = run(Command(argv, command.cwd, env))
                if outcome.exit_status != 0:
                    raise RuntimeError(f"{variant} {kind} (wire) failed: {outcome.reason()}")
                lines = [json.loads(x) for x in log.read_text().splitlines()]
                # A wait is an answer that came at least 0.75 RTT after the last send (every
                # real one takes a whole RTT): the server's KEXINIT, already in the socket
                # when paramiko gets to it after its import, is not counted (at RTT/2 it was,
                # depending on how long the loaded client took to import).
                found_waits = waits(lines, 1.5 * rtt / 1000)
                counts.setdefault((variant, kind), []).append(len(found_waits))
                seconds.setdefault((variant, kind), []).append(outcome.seconds)
    direct.reset()
    found: dict[str, dict[str, str]] = {}
    for (variant, kind), said in counts.items():
        times = seconds[(variant, kind)]
        found.setdefault(variant, {})[kind] = (
            f"{'/'.join(map(str, said))}, {statistics.median(times):.2f} s "
            f"[{min(times):.2f}–{max(times):.2f}]"
        )
    return found


def _pct(values: list[float]) -> str:
    if not values:
        return "–"
    mid = (statistics.median(values) - 1) * 100
    return f"{mid:+.1f} % [{(min(values) - 1) * 100:+.0f}, {(max(values) - 1) * 100:+.0f}]"


def render(
    cells: list[Cell], trips: dict[str, dict[str, str]], trips_rtt: int, bytes_rtt: int
) -> list[str]:
    """The ablation tables: wall-time effect per cell, round trips, bytes and client CPU."""
    variants = [ALL_ON, *[v for v in MECHANISMS if any(v in c.runs for c in cells)]]
    out: list[str] = []
    for kind in ("change", "rerun"):
        header = ["off", *(f"N={c.hosts} RTT {c.rtt}" for c in cells)]
        rows = []
        for variant in variants:
            if variant == ALL_ON:
                row = [
                    f"{statistics.median(r.seconds for r in c.runs[ALL_ON][kind]):.2f} s "
                    f"[{min(r.seconds for r in c.runs[ALL_ON][kind]):.2f}–"
                    f"{max(r.seconds for r in c.runs[ALL_ON][kind]):.2f}]"
                    for c in cells
                ]
            else:
                row = [_pct(c.ratios(variant, kind)) for c in cells]
            rows.append([variant, *row])
        out += [
            f"**{kind}**: wall time (all on: median [min–max] s; a mechanism off: "
            "median change against all on in the same round [range over rounds])",
            "",
            *table(header, rows),
            "",
        ]
    header = [
        "off",
        "waits change",
        "waits re-run",
        "bytes change (up/down)",
        *(f"client CPU N={c.hosts} RTT {c.rtt} change" for c in cells),
    ]
    rows = []
    big = [c for c in cells if c.rtt == bytes_rtt and c.hosts == 1]
    for variant in variants:
        row = [
            variant,
            str(trips.get(variant, {}).get("change", "–")),
            str(trips.get(variant, {}).get("rerun", "–")),
        ]
        if big and variant in big[0].runs:
            runs = big[0].runs[variant]["change"]
            row.append(
                f"{statistics.median(r.up for r in runs) / 1000:.1f} / "
                f"{statistics.median(r.down for r in runs) / 1000:.1f} kB"
            )
        else:
            row.append("–")
        for c in cells:
            runs = c.runs.get(variant, {}).get("change", [])
            row.append(f"{statistics.median(r.cpu for r in runs):.3f} s" if runs else "–")
        rows.append(row)
    floor_row = ["floor (connect + true)", "", "", ""] + [
        f"{statistics.median(r.cpu for r in c.runs['floor']['connect']):.3f} s" for c in cells
    ]
    out += [
        f"Round trips (waits on the wire at RTT {trips_rtt} ms, N = 1, `bench.wire`), "
        "bytes through the proxy and the client process's CPU-seconds (median):",
        "",
        *table(header, [*rows, floor_row]),
        "",
    ]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench --ablate")
    parser.add_argument("--hosts", default="1,20")
    parser.add_argument("--rtt", default="0,50,100")
    parser.add_argument("--repeat", type=int, default=3, help="0: round trips only")
    parser.add_argument("--only", default=",".join(MECHANISMS))
    parser.add_argument("--out", type=Path, default=Path("/tmp/deploy-ablate"))
    # Round trips are counted where a wait cannot be confused with a stall of a loaded
    # client (a wait is an answer that came RTT/2 after the client's last send).
    parser.add_argument("--trip-rtt", type=int, default=400)
    options = parser.parse_args(argv)
    hosts = [int(x) for x in options.hosts.split(",")]
    rtts = [int(x) for x in options.rtt.split(",")]
    variants = [ALL_ON, *[v for v in options.only.split(",") if v]]
    os.environ.pop("SSH_AUTH_SOCK", None)
    ensure_bytecode()
    from deploy.sandbox.sshd import SshdSandbox
    from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

    base = Path(tempfile.mkdtemp(prefix="deploy-ablate-"))
    deploy = DeployTool(
        [sys.executable, "-m", "deploy.cli"], REPO / "playbooks" / f"{PLAYBOOK}.yaml"
    )
    floor = FloorTool(sys.executable)
    cells: list[Cell] = []
    trips: dict[str, dict[str, str]] = {}
    options.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    for count in hosts:
        with SshdSandbox(base / f"n{count}" / "sandbox") as sandbox:
            fleet = start_fleet(
                sandbox, count, kimi_k25_source(PATCH_NEEDED), REPO, base / f"n{count}" / "ws"
            )
            _variant(Cell(count, 0), fleet, deploy, ALL_ON, None)  # warm-up, not kept
            if count == 1 and options.trip_rtt:
                trips = _round_trips(fleet, deploy, variants, options.trip_rtt, base)
            for rtt in rtts if options.repeat else []:
                cell = Cell(count, rtt)
                cells.append(cell)
                if rtt == 0:
                    _rounds(cell, fleet, deploy, floor, variants, options.repeat, None)
                else:
                    with DelayNetwork(rtt, INITIAL_SEGMENTS) as net:
                        ports = {h.name: net.forward(h.port) for h in fleet.hosts}
                        view = through(fleet, ports, base / f"n{count}" / f"rtt{rtt}", REPO)
                        _rounds(cell, view, deploy, floor, variants, options.repeat, net)
                raw = {
                    f"{c.hosts}/{c.rtt}": {
                        v: {k: [r.__dict__ for r in runs] for k, runs in kinds.items()}
                        for v, kinds in c.runs.items()
                    }
                    for c in cells
                }
                (options.out / "ablate.json").write_text(
                    json.dumps({"cells": raw, "round_trips": trips}, indent=1)
                )
                (options.out / "ablate.md").write_text(
                    "\n".join(render(cells, trips, options.trip_rtt, max(rtts))) + "\n"
                )
    if not options.repeat:  # round trips only
        (options.out / "trips.json").write_text(json.dumps(trips, indent=1))
    print(f"ablate: done in {time.monotonic() - began:.0f} s, {options.out}", file=sys.stderr)
    return 0
