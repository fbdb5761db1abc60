"""``python -m bench --scale``: the "Fleet scale" section — 100 and 200 hosts, loopback.

At 100 and 200 hosts the floor (a paramiko login and one ``true`` per host, on threads of one
process) stops being the limit of a run; what is left is CPU, the tool's and the hosts'. So
this part of the bench measures what scales: wall time, the tool's CPU-seconds and its
process tree's memory (`bench.usage`), per tool and fleet size, on loopback only (a delay
adds the same round trips to every host in parallel: it moves no CPU).

On a machine whose cores the hosts' daemons share with the tool, the hosts' CPU hides the
tool's; ``--pin-client CPUS --pin-hosts CPUS`` adds a second placement, run in the same rounds:
each round times every tool unpinned and pinned (the order of the two alternating from round
to round), the hosts' daemons re-pinned between the two (`bench.pinning`).

``--max-hosts TOOL=N`` leaves a tool out above N hosts (the page says so, with the reason);
``--deploy-workers N`` times ``deploy apply --workers N`` too, where deploy has that option.

After every round the section is written into ``--out`` (replacing the page's "Fleet scale"
section, or before "Ablation", the rest kept) and the raw figures beside it as JSON
(``--out`` with ``.scale.json``), so a run cut short still leaves its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import machine, toolchain
from bench.deploybuild import (
    REPO,
    baseline_worktree,
    deploy_executable,
    ensure_bytecode,
    remove_worktree,
)
from bench.fleet import Fleet, start_fleet
from bench.options import parse
from bench.pinning import Placement
from bench.report_scale import render, splice
from bench.runner import Series, measure
from bench.tools import AnsibleTool, Command, DeployTool, FabricTool, FloorTool, PyinfraTool, Tool
from bench.workload import PLAYBOOK, methods_source
from deploy.sandbox.sshd import SshdSandbox
from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

#: The tool name of ``deploy apply --workers N`` in the tables.
WORKERS = "deploy-workers"
#: Hosts of the untimed warm-up fleet (page cache, .pyc files of every tool).
WARM_HOSTS = 2


class DeployWorkersTool(DeployTool):
    """``deploy apply ... --workers N``: the fleet in N worker processes (issue 33, point 3)."""

    name = WORKERS

    def __init__(
        self, executable: list[str], playbook: Path, workers: int, where: Path | None = None
    ) -> None:
        super().__init__(executable, playbook)
        self.workers = workers
        #: ``--workers-ref``: a worktree of that revision, run with PYTHONPATH on it.
        self.where = where

    def command(self, fleet: Fleet, forks: int) -> Command:
        plain = super().command(fleet, forks)
        env = plain.env if self.where is None else {**plain.env, "PYTHONPATH": str(self.where)}
        return Command([*plain.argv, "--workers", str(self.workers)], plain.cwd, env)


#: A series' key here: (placement name, tool, hosts, kind).
ScaleKey = tuple[str, str, int, str]


@dataclass
class ScaleResults:
    """Everything one ``--scale`` run measured."""

    sizes: list[int]
    tools: list[str]
    placements: list[Placement]
    repeat: int
    command: str
    series: dict[ScaleKey, Series] = field(default_factory=dict)
    #: tool -> (the most hosts it was run on, why not more).
    capped: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: "N = 100, round 2" -> the load averages when that round began.
    load: dict[str, str] = field(default_factory=dict)
    #: size -> timed rounds made (fewer than ``repeat`` when the time limit came first).
    rounds: dict[int, int] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: size -> seconds its rounds took.
    spent: dict[int, float] = field(default_factory=dict)
    workers: int = 0

    def get(self, placement: str, tool: str, count: int, kind: str) -> Series | None:
        return self.series.get((placement, tool, count, kind))

    def runs(self, tool: str, count: int) -> bool:
        cap = self.capped.get(tool)
        return cap is None or count <= cap[0]

    def to_json(self) -> dict[str, object]:
        """The raw figures: every sample of every series, and the context."""
        return {
            "command": self.command,
            "sizes": self.sizes,
            "tools": self.tools,
            "placements": [p.describe() for p in self.placements],
            "rounds": self.rounds,
            "load": self.load,
            "facts": self.facts,
            "notes": self.notes,
            "spent": self.spent,
            "capped": self.capped,
            "series": [{"placement": k[0], **asdict(s)} for k, s in sorted(self.series.items())],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScaleResults:
        """The results `to_json` wrote; the placements from the command line it records."""
        options = parse(shlex.split(data["command"])[3:])
        placements = [Placement()] + ([options.placement] if options.placement.pinned else [])
        results = cls(
            sizes=list(data["sizes"]),
            tools=list(data["tools"]),
            placements=placements,
            repeat=options.repeat,
            command=data["command"],
            workers=options.deploy_workers,
        )
        results.rounds = {int(k): int(v) for k, v in data["rounds"].items()}
        results.spent = {int(k): float(v) for k, v in data["spent"].items()}
        results.load = dict(data["load"])
        results.facts = dict(data["facts"])
        results.notes = list(data["notes"])
        results.capped = {k: (int(v[0]), str(v[1])) for k, v in data["capped"].items()}
        for entry in data["series"]:
            fields = {k: v for k, v in entry.items() if k != "placement"}
            series = Series(**fields)
            results.series[(entry["placement"], series.tool, series.hosts, series.kind)] = series
        return results


class Scale:
    """One ``--scale`` invocation."""

    def __init__(self, options: argparse.Namespace, argv: list[str]) -> None:
        self.options = options
        self.deadline = time.monotonic() + float(options.time_limit)
        self.load_at_start = machine.load_average()
        playbook = REPO / "playbooks" / f"{PLAYBOOK}.yaml"
        methods = methods_source(playbook)
        anchors = {"ansible", "pyinfra"} & set(options.tools)
        self.toolchain = toolchain.ensure(options.venv) if anchors else None
        executable = deploy_executable()
        made: dict[str, Tool] = {
            "deploy": DeployTool(executable, playbook),
            "fabric": FabricTool(sys.executable, methods),
            "floor": FloorTool(sys.executable),
        }
        if self.toolchain is not None:
            made["ansible"] = AnsibleTool(self.toolchain, methods)
            made["pyinfra"] = PyinfraTool(self.toolchain, methods)
        names = [n for n in options.tools if n in made]
        self.base = Path(tempfile.mkdtemp(prefix="deploy-bench-scale-"))
        self.workers_tree: Path | None = None
        self.notes_ahead: list[str] = []
        if options.deploy_workers:
            tool = DeployWorkersTool(executable, playbook, options.deploy_workers)
            if options.workers_ref:
                self.workers_tree = baseline_worktree(options.workers_ref, self.base / "workers")
                tool = DeployWorkersTool(
                    [sys.executable, "-m", "deploy.cli"],
                    playbook,
                    options.deploy_workers,
                    self.workers_tree,
                )
                commit = machine.revision(REPO, options.workers_ref)
                self.notes_ahead = [
                    f"`deploy --workers {options.deploy_workers}` is deploy as of "
                    f"`{options.workers_ref}` ({commit}: a git worktree of it, run with "
                    "PYTHONPATH on it); `deploy` is this checkout's"
                ]
            made[WORKERS] = tool
            names.insert(names.index("deploy") + 1 if "deploy" in names else 0, WORKERS)
        self.tools = [made[n] for n in names]
        placements = [Placement()]
        if options.placement.pinned:
            placements.append(options.placement)
        self.results = ScaleResults(
            sizes=list(options.hosts),
            tools=names,
            placements=placements,
            repeat=options.repeat,
            command=" ".join(["python -m bench", *argv]),
            workers=options.deploy_workers,
        )
        for tool, count in options.max_hosts.items():
            self.results.capped[tool] = (
                count,
                f"`--max-hosts {tool}={count}`, to keep the run within its time limit",
            )
        if options.change_only:
            self.results.notes.append("change runs only (`--change-only`): no re-runs were timed")
        if options.forks:
            self.results.notes.append(
                f"every tool ran at most {options.forks} hosts at a time (`--forks "
                f"{options.forks}`: deploy's and ansible's `--forks`, pyinfra's `--parallel`, the "
                "floor's and the Fabric script's threads)"
            )
        left_out = sorted(set(options.tools) - set(made))
        if left_out:
            self.results.notes.append(f"not run (no toolchain): {', '.join(left_out)}")
        self.results.notes += self.notes_ahead
        self.results.notes.append(ensure_bytecode())
        self.original = kimi_k25_source(PATCH_NEEDED)
        self.facts_at_start: dict[str, str] = {}

    def log(self, message: str) -> None:
        print(f"bench --scale: {message}", file=sys.stderr, flush=True)

    def warm_up(self) -> None:
        """Every tool once, untimed, on `WARM_HOSTS` hosts: the page cache and .pyc files."""
        with SshdSandbox(self.base / "warm" / "sandbox") as sandbox:
            fleet = start_fleet(sandbox, WARM_HOSTS, self.original, REPO, self.base / "warm/ws")
            for tool in self.tools:
                tool.prepare(fleet, WARM_HOSTS)
                measure(tool, fleet, WARM_HOSTS)
        self.log("warm-up done")

    def fleets(self, stack: contextlib.ExitStack) -> dict[int, Fleet]:
        """Every size's daemons at once (idle daemons cost nothing), each in its own sandbox,
        so that a round can visit every size: each size then gets as many rounds."""
        fleets = {}
        for count in self.options.hosts:
            sandbox = stack.enter_context(SshdSandbox(self.base / f"n{count}" / "sandbox"))
            began = time.monotonic()
            fleet = start_fleet(sandbox, count, self.original, REPO, self.base / f"n{count}/ws")
            self.log(f"{count} hosts up in {time.monotonic() - began:.1f} s")
            for tool in self.tools:
                if self.results.runs(tool.name, count):
                    tool.prepare(fleet, count)
                    kinds = ("change", "rerun") if tool.changes_files else ("connect",)
                    if self.options.change_only:
                        kinds = kinds[:1]
                    for placement in self.results.placements:
                        for kind in kinds:
                            key = (placement.name, tool.name, count, kind)
                            self.results.series[key] = Series(tool.name, count, kind)
            fleets[count] = fleet
        return fleets

    def rounds(self, fleets: dict[int, Fleet]) -> None:
        """``--repeat`` rounds, each of every size, placement and tool; a further round only
        if the last one fits in what is left of ``--time-limit``."""
        results = self.results
        last = 0.0
        for round_ in range(1, self.options.repeat + 1):
            if round_ > 1 and self.deadline - time.monotonic() < last:
                results.notes.append(
                    f"{round_ - 1} timed round(s) of {self.options.repeat}: a further one "
                    f"({last:.0f} s like the last) did not fit in what was left of --time-limit"
                )
                break
            start = time.monotonic()
            for count, fleet in fleets.items():
                began = time.monotonic()
                results.load[f"N = {count}, round {round_}"] = machine.load_average()
                order = results.placements if round_ % 2 else results.placements[::-1]
                for placement in order:
                    placement.apply_hosts(fleet)
                    for tool in self.tools:
                        if results.runs(tool.name, count):
                            self.one(tool, fleet, count, placement, round_)
                results.rounds[count] = round_
                results.spent[count] = results.spent.get(count, 0.0) + time.monotonic() - began
                self.write()
            last = time.monotonic() - start
            self.log(f"round {round_} done in {last:.0f} s")

    def one(self, tool: Tool, fleet: Fleet, count: int, placement: Placement, round_: int) -> None:
        forks = min(self.options.forks or count, count)
        attempts = measure(tool, fleet, forks, placement, rerun=not self.options.change_only)
        for attempt in attempts:
            key = (placement.name, tool.name, count, attempt.kind)
            self.results.series[key].add(attempt, f"round {round_}", timed=True)
        if tool.changes_files and len(attempts) == 1 and not self.options.change_only:
            self.results.series[(placement.name, tool.name, count, "rerun")].skipped += 1
        self.log(
            f"N={count} {placement.name} round {round_} {tool.name}: "
            + " / ".join(
                f"{a.kind} {a.outcome.seconds:.2f} s {a.outcome.cpu:.2f} CPU-s "
                f"{a.outcome.peak_rss / 2**20:.0f} MiB"
                + (f" FAILED: {a.outcome.reason()}" if a.failed else "")
                + (f" WRONG: {a.wrong[0]}" if a.wrong else "")
                for a in attempts
            )
        )

    def write(self) -> None:
        """The section into the page and the raw figures beside it (after every round).

        The versions are those at the start (`main`): the checkout may move while a long run
        goes on; the date and the closing load average are the latest write's."""
        results = self.results
        latest = machine.describe(REPO, self.toolchain, self.load_at_start)
        results.facts = {**latest, **self.facts_at_start}
        for label in ("date (UTC)", "load average (1/5/15 min) at end"):
            results.facts[label] = latest[label]
        out: Path = self.options.out
        out.parent.mkdir(parents=True, exist_ok=True)
        page = out.read_text() if out.exists() else "# Performance\n"
        out.write_text(splice(page, render(results)))
        out.with_suffix(".scale.json").write_text(json.dumps(results.to_json(), indent=1) + "\n")

    def main(self) -> int:
        self.facts_at_start = machine.describe(REPO, self.toolchain, self.load_at_start)
        try:
            self.warm_up()
            with contextlib.ExitStack() as stack:
                self.rounds(self.fleets(stack))
        finally:
            if self.workers_tree is not None:
                remove_worktree(self.workers_tree)
            shutil.rmtree(self.base, ignore_errors=True)
        self.write()
        self.log(f"wrote {self.options.out}")
        every = self.results.series.values()
        return 0 if all(s.ok and not s.failures for s in every) else 1


def rerender(source: Path, out: Path) -> int:
    """The section again from a run's JSON (``--from-json``), into ``out``: no measuring."""
    results = ScaleResults.from_json(json.loads(source.read_text()))
    page = out.read_text() if out.exists() else "# Performance\n"
    out.write_text(splice(page, render(results)))
    print(f"bench --scale: wrote {out} from {source}", file=sys.stderr)
    return 0


def main(options: argparse.Namespace, argv: list[str]) -> int:
    if options.from_json is not None:
        return rerender(options.from_json, options.out)
    if os.cpu_count() == 1 and options.placement.pinned:
        print("bench --scale: pinning needs two cores", file=sys.stderr)
        return 2
    return Scale(options, argv).main()
