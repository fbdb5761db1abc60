"""``python -m bench.cpu``: the client's CPU-seconds per host and fixed, against the floor.

Issue 33, point 2 measures the CPU-seconds of the whole ``deploy`` process (``RUSAGE_CHILDREN``
around it) for kimi-eagle3's change run, against the floor (`bench/floor.py`) **of the same
round**: on a shared, loaded machine a busy core runs the same code slower, so a figure is only
compared with what was measured beside it. Each round, for each fleet size (``--hosts 1,20``),
every build (this checkout, and with ``--baseline-ref REV`` that revision's worktree too) makes
a change run on freshly reset hosts, then the floor runs. The cost above the floor at N hosts is
the median over rounds of (deploy − floor); the per-host cost is the slope between the smallest
and the largest N, the fixed cost what is left at the smallest. With a baseline the same is
given for the paired difference (this build − baseline, same round), which cancels most of the
machine's noise.

Prints a table and writes the raw figures as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.deploybuild import (
    REPO,
    baseline_tool,
    baseline_worktree,
    ensure_bytecode,
    remove_worktree,
)
from bench.fleet import Fleet, _write_workstation, start_fleet
from bench.runner import change_wrong, run
from bench.tools import Command, DeployTool, FloorTool
from bench.workload import PLAYBOOK


class WrongResult(Exception):
    """A run exited 0 but the files say otherwise: never discarded as a bad round."""


def _cpu(command: Command) -> float:
    """CPU-seconds (user + system) of ``command``'s process and its children; raises if it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome = run(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if outcome.exit_status != 0:
        said = (outcome.stdout + outcome.stderr).strip().splitlines()[-12:]
        raise RuntimeError(f"{command.argv[:4]}: {outcome.reason()}\n" + "\n".join(said))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _view(fleet: Fleet, count: int, workdir: Path) -> Fleet:
    """The first ``count`` hosts of ``fleet``, with a workstation (inventory) of their own."""
    view = Fleet(fleet.sandbox, fleet.hosts[:count], workdir, fleet.original, fleet.python)
    view.home.mkdir(parents=True, exist_ok=True)
    _write_workstation(view, REPO)
    return view


def fit(sizes: list[int], above: dict[int, float]) -> tuple[float, float]:
    """(per host, fixed) from the costs above the floor at the smallest and largest size."""
    low, high = min(sizes), max(sizes)
    slope = (above[high] - above[low]) / (high - low)
    return slope, above[low] - slope * low


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu")
    parser.add_argument("--hosts", default="1,20")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-ref", default="")
    parser.add_argument("--rerun", action="store_true", help="also the no-change re-run")
    parser.add_argument("--out", type=Path, default=Path("/tmp/deploy-cpu.json"))
    parser.add_argument(
        "--profile", type=int, default=0, help="N: one change run of N hosts under bench.cpuprofile"
    )
    options = parser.parse_args(argv)
    sizes = [int(x) for x in options.hosts.split(",")]
    os.environ.pop("SSH_AUTH_SOCK", None)
    ensure_bytecode()
    from deploy.sandbox.sshd import SshdSandbox
    from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

    base = Path(tempfile.mkdtemp(prefix="deploy-cpu-"))
    playbook = REPO / "playbooks" / f"{PLAYBOOK}.yaml"
    builds: dict[str, DeployTool] = {
        "deploy": DeployTool([sys.executable, "-m", "deploy.cli"], playbook)
    }
    where = base / "baseline"
    if options.baseline_ref:
        builds["baseline"] = baseline_tool(baseline_worktree(options.baseline_ref, where), playbook)
    floor = FloorTool(sys.executable)
    #: (build or "floor", kind, N) -> CPU-seconds per round
    found: dict[str, list[float]] = {}
    loads: list[float] = []
    try:
        with SshdSandbox(base / "sandbox") as sandbox:
            whole = start_fleet(
                sandbox, max(sizes), kimi_k25_source(PATCH_NEEDED), REPO, base / "ws"
            )
            views = {n: _view(whole, n, base / f"n{n}") for n in sizes}
            if options.profile:
                return _profile(views[options.profile], builds["deploy"], options.out)
            for view in views.values():
                floor.prepare(view, len(view.hosts))
            round_, failed = -1, 0  # round -1: warm-up, not kept
            while round_ < options.rounds:
                loads.append(os.getloadavg()[0])
                names = list(builds) if round_ % 2 else list(reversed(builds))
                try:
                    measured = _round(views, builds, names, floor, options.rerun)
                except RuntimeError as exc:  # a run failed (a host timed out under load)
                    failed += 1
                    print(f"cpu: round discarded: {exc}", file=sys.stderr)
                    if failed > options.rounds:
                        raise
                    continue
                if round_ >= 0:
                    for key, cpu in measured.items():
                        found.setdefault(key, []).append(cpu)
                    print(f"cpu: round {round_ + 1}/{options.rounds} done", file=sys.stderr)
                round_ += 1
    finally:
        if options.baseline_ref:
            remove_worktree(where)
        shutil.rmtree(base, ignore_errors=True)
    options.out.write_text(json.dumps({"sizes": sizes, "loads": loads, "cpu": found}, indent=1))
    print(report(sizes, found, loads))
    return 0


def _round(
    views: dict[int, Fleet],
    builds: dict[str, DeployTool],
    names: list[str],
    floor: FloorTool,
    rerun: bool,
) -> dict[str, float]:
    """One round: each build's change run (and re-run) and the floor, at each size; a round
    is kept whole or not at all (a failed run raises), so that builds stay paired."""
    measured: dict[str, float] = {}
    for n, view in views.items():
        for name in names:
            tool = builds[name]
            view.reset()
            measured[f"{name} change {n}"] = _cpu(tool.command(view, n))
            wrong = change_wrong(tool, view)
            if wrong:
                raise WrongResult(f"{name} N={n}: {wrong[:2]}")
            if rerun:
                measured[f"{name} rerun {n}"] = _cpu(tool.command(view, n))
        measured[f"floor connect {n}"] = _cpu(floor.command(view, n))
    return measured


def _profile(view: Fleet, tool: DeployTool, out: Path) -> int:
    """One change run of ``view``'s hosts in-process under `bench.cpuprofile` (after an
    unprofiled warm-up run), its merged stats in ``out``; the top of them printed."""
    import pstats

    n = len(view.hosts)
    view.reset()
    _cpu(tool.command(view, n))
    view.reset()
    plain = tool.command(view, n)
    script = os.environ.get("BENCH_CPU_SCRIPT")  # another in-process runner, same arguments
    runner = [script] if script else ["-m", "bench.cpuprofile"]
    argv = [sys.executable, *runner, str(out), str(view.workdir), *plain.argv[3:]]
    env = {**plain.env, "PYTHONPATH": str(REPO)}
    print(f"profiled run: {_cpu(Command(argv, plain.cwd, env)):.3f} CPU-s", file=sys.stderr)
    if not script:
        pstats.Stats(str(out)).sort_stats("tottime").print_stats(40)
    return 0


def _above(found: dict[str, list[float]], name: str, kind: str, n: int, minus: str) -> list[float]:
    mine = found[f"{name} {kind} {n}"]
    other = found[f"{minus} {n}"]
    return [a - b for a, b in zip(mine, other, strict=True)]


def report(sizes: list[int], found: dict[str, list[float]], loads: list[float]) -> str:
    """Per build and kind: medians at each N, above the floor, per host and fixed."""
    lines = [f"load (1 min) at each round: {', '.join(f'{x:.1f}' for x in loads)}"]
    rows = sorted({k.rsplit(" ", 1)[0] for k in found if not k.startswith("floor")})
    for row in rows:
        name, kind = row.split(" ")
        above = {n: statistics.median(_above(found, name, kind, n, "floor connect")) for n in sizes}
        slope, fixed = fit(sizes, above)
        cells = ", ".join(
            f"N={n}: {statistics.median(found[f'{row} {n}']):.3f} s (−floor {above[n]:.3f})"
            for n in sizes
        )
        lines.append(f"{row}: {cells}; per host {slope * 1000:.2f} ms, fixed {fixed:.3f} s")
        if name != "baseline" and f"baseline {kind} {sizes[0]}" in found:
            diff = {
                n: statistics.median(_above(found, name, kind, n, f"baseline {kind}"))
                for n in sizes
            }
            slope, fixed = fit(sizes, diff)
            lines.append(
                f"  {row} − baseline (paired): "
                + ", ".join(f"N={n}: {diff[n] * 1000:+.1f} ms" for n in sizes)
                + f"; per host {slope * 1000:+.2f} ms, fixed {fixed * 1000:+.1f} ms"
            )
    floors = ", ".join(
        f"N={n}: {statistics.median(found[f'floor connect {n}']):.3f} s" for n in sizes
    )
    lines.append(f"floor: {floors}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
