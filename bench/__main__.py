"""``python -m bench``: time deploy, ansible-core, pyinfra, a plain Fabric script and the
paramiko floor on N hosts, over loopback and through a network with a round-trip time.

Usage (from the repository root)::

    python -m bench --hosts 1,20 --rtt 0,50,100 --repeat 3 --time-limit 2400

For each fleet size it starts that many real sshd daemons on loopback, lays SGLang 0.5.9's
real ``kimi_k25.py`` on each, and then, for each round-trip time of ``--rtt`` (0 = straight
to the daemons; otherwise every tool, the floor included, reaches each host through
`bench.delay`'s proxy, which holds every chunk RTT/2 in each direction and models a fresh
connection's TCP congestion window, ``--initial-window``), ``--repeat`` times
and tool after tool (interleaved, so that a slow minute of the machine hurts every tool
alike): reset the files, time the change run, check every file with ``ast``, time the
no-change re-run, check nothing moved. One untimed warm-up round (at the first size and RTT
only: after it the caches stay warm) fills the page cache and the ``.pyc`` files of every
tool, so no tool pays for a cold disk. Then, on loopback, it records deploy's SSH operation
counts (``--json``) and profiles one deploy run of each kind, and finally times ``deploy
--help`` and ``deploy validate``; at the largest RTT it logs every SSH message of one run
of each kind (`bench.wire`: "Where the round trips go"). Before any of it, a ping-pong through
the proxy proves that it adds at least the RTT asked for.

``python -m bench --ablate [--hosts 1,20 --rtt 0,50,100 --repeat N --trip-rtt 400]`` times
each speed mechanism switched off against all on instead (`bench.ablate`); its section of the
page is written by hand from that output and kept when the page is regenerated (`KEPT`).

Every timed run also records the CPU-seconds and the peak memory of the tool's process tree
(`bench.usage`); ``--pin-client CPUS --pin-hosts CPUS`` runs the tools and the hosts' daemons
on different cores (`bench.pinning`). ``python -m bench --scale --hosts 100,200 [--pin-client 0
--pin-hosts 1]`` measures the "Fleet scale" section only, unpinned and pinned in the same rounds,
and writes it into the page with its raw figures beside it (`bench.scale`).

``--baseline-ref REV`` times deploy as of REV too, in the same rounds (`bench.deploybuild`),
so that "no worse than before" is read from one run. The command line is `bench.options`;
what is measured of deploy alone after the rounds, `bench.deploy_extras`.

The benchmark stops by itself: every process has a timeout, a fleet size whose estimated cost
exceeds what is left of ``--time-limit`` is skipped (and the report says so), and every sshd
daemon is stopped on the way out, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from bench import budget, deploy_extras, machine, toolchain
from bench.costs import unit_prices
from bench.delay import DelayNetwork
from bench.deploybuild import (
    BASELINE,
    REPO,
    BaselineError,
    baseline_tool,
    baseline_worktree,
    deploy_executable,
    ensure_bytecode,
    remove_worktree,
)
from bench.fleet import Fleet, start_fleet, through
from bench.options import parse
from bench.plot import draw
from bench.report import render
from bench.results import Results
from bench.runner import Attempt, Series, measure
from bench.tools import (
    AnsibleTool,
    DeployTool,
    FabricTool,
    FloorNoDelayTool,
    FloorTool,
    PyinfraTool,
    Tool,
)
from bench.workload import PLAYBOOK, methods_source
from deploy.sandbox.sshd import SshdSandbox
from deploy.sandbox.sshd_setup import SandboxError
from deploy.sandbox.wheels import PATCH_NEEDED, kimi_k25_source

#: Fleet sizes from which the time of a larger one is predicted.
SCALABLE = 10


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM into SystemExit so that every ``with`` block stops its daemons."""
    raise SystemExit(128 + signum)


class Bench:
    """One benchmark invocation: the options, the results so far, the clock."""

    def __init__(self, options: argparse.Namespace, argv: list[str]) -> None:
        self.options = options
        self.deadline: float = time.monotonic() + float(options.time_limit)
        #: Why the run ended early (SIGTERM), if it did: the page says so.
        self.interrupted = ""
        self.load_at_start = machine.load_average()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.logs = toolchain.default_root().parent / "bench-logs" / stamp
        self.original = kimi_k25_source(PATCH_NEEDED)
        playbook = REPO / "playbooks" / f"{PLAYBOOK}.yaml"
        self.methods = methods_source(playbook)
        anchors = {"ansible", "pyinfra"} & set(options.tools)
        self.toolchain = toolchain.ensure(options.venv) if anchors else None
        self.deploy = DeployTool(deploy_executable(), playbook)
        bytecode = ensure_bytecode()
        self.base = Path(tempfile.mkdtemp(prefix="deploy-bench-"))
        #: ``--baseline-ref``: the older build, run in the same rounds (`bench.deploybuild`).
        self.baseline: DeployTool | None = None
        tools = list(options.tools)
        if options.baseline_ref:
            where = baseline_worktree(options.baseline_ref, self.base / "baseline")
            self.baseline = baseline_tool(where, playbook)
            if "deploy" in tools:
                tools.insert(tools.index("deploy") + 1, BASELINE)
            else:
                tools.append(BASELINE)
        self.tool_names = tools
        self.results = Results(
            sizes=[],
            rtts=options.rtt,
            initial_window=options.initial_window,
            tools=tools,
            repeat=options.repeat,
            command=" ".join(["python -m bench", *argv]),
            budget=budget.load(),
            deploy_command=" ".join(
                [
                    *(Path(a).name for a in self.deploy.executable),
                    *("apply", PLAYBOOK, "--yes"),
                    *self.deploy.skip,
                ]
            ),
        )
        self.results.notes.append(bytecode)
        if options.baseline_ref:
            self.results.baseline_ref = options.baseline_ref
            self.results.notes.append(
                f"`{BASELINE}` is deploy as of `{options.baseline_ref}` (a git worktree of it, "
                "byte-compiled, run with `python -m deploy.cli` and PYTHONPATH on it), timed in "
                "the same rounds as this checkout's deploy"
            )
        if options.placement.pinned:
            self.results.notes.append(
                f"pinned: {options.placement.describe()}; the delay proxy and the bench itself "
                "are not pinned"
            )
        if options.sftp != "internal-sftp":
            self.results.notes.append(
                f"the hosts' sshd runs `Subsystem sftp {options.sftp}`: every SFTP session "
                "starts through the user's login shell (the default is `internal-sftp`)"
            )

    def log(self, message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def tools(self) -> list[Tool]:
        made: dict[str, Tool] = {
            "deploy": self.deploy,
            "fabric": FabricTool(sys.executable, self.methods),
            "floor": FloorTool(sys.executable),
            "floor-nodelay": FloorNoDelayTool(sys.executable),
        }
        if self.toolchain is not None:
            made["ansible"] = AnsibleTool(self.toolchain, self.methods)
            made["pyinfra"] = PyinfraTool(self.toolchain, self.methods)
        if self.baseline is not None:
            made[BASELINE] = self.baseline
        return [made[name] for name in self.tool_names]

    def settle(self, count: int) -> None:
        """Wait (up to ``--settle`` s) until the 1-minute load average is below half the cores.

        Other test suites on the same cores slow every tool, the ones with more processes
        most; the report states the load each size started at, so a noisy number is visible.
        """
        quiet = (os.cpu_count() or 1) / 2
        began = time.monotonic()
        while os.getloadavg()[0] > quiet and time.monotonic() - began < self.options.settle:
            time.sleep(2)
        waited = time.monotonic() - began
        self.results.load[count] = f"{machine.load_average()} (after waiting {waited:.0f} s)"

    def size(self, count: int, base: Path) -> None:
        """Everything measured on a fleet of ``count`` hosts, at every round-trip time."""
        self.results.sizes.append(count)  # now: a run stopped midway still shows this size
        with SshdSandbox(base / "sandbox", sftp=self.options.sftp) as sandbox:
            began = time.monotonic()
            fleet = start_fleet(sandbox, count, self.original, REPO, base / "workstation")
            self.log(f"{count} host(s) up in {time.monotonic() - began:.1f} s")
            if self.options.placement.pinned:
                self.options.placement.apply_hosts(fleet)
            for index, rtt in enumerate(self.options.rtt):
                later = self.later_weight(count, index)
                if self.remaining() < 0:
                    self.results.skipped_rtt[(count, rtt)] = "no time left of --time-limit"
                    self.log(f"skipping N={count} RTT={rtt} ms: no time left")
                    continue
                warm = count == self.options.hosts[0] and rtt == self.options.rtt[0]
                if rtt == 0:
                    self.rounds(fleet, count, rtt, warm, later)
                    continue
                with DelayNetwork(rtt, self.options.initial_window) as network:
                    ports = {h.name: network.forward(h.port) for h in fleet.hosts}
                    view = through(fleet, ports, base / f"workstation-rtt{rtt}", REPO)
                    self.rounds(view, count, rtt, warm, later)
                    if network.errors:
                        self.results.notes.append(
                            f"N={count} RTT={rtt} ms: the delay proxy could not forward "
                            f"{len(network.errors)} connection(s): {network.errors[0]}"
                        )
            if "deploy" in self.options.tools:
                deploy_extras.op_counts(self.deploy, fleet, count, self.results)
                deploy_extras.profile(self.deploy, fleet, count, self.results)
                if count == self.options.hosts[0]:
                    wire_rtt = self.options.wire_rtt
                    if wire_rtt is None:
                        wire_rtt = float(max(self.options.rtt))
                    if wire_rtt > 0:
                        deploy_extras.wire_probe(fleet, wire_rtt, base / "wire", self.results)
                    deploy_extras.cli_times(self.deploy, fleet, self.results)
                    fleet.reset()
                    host = fleet.hosts[0]
                    self.results.prices = unit_prices(host, str(fleet.model_file(host)))

    def later_weight(self, count: int, index: int) -> float:
        """What is still to measure after RTT number ``index`` at ``count`` hosts, in rounds
        like the current one: 1.5 for each later RTT of this size (a slower link costs more),
        and for a larger size N' 1.5 x (N' / count) ** 0.55 per RTT (ansible's round grows
        about 5x from 1 to 20 hosts on this machine)."""
        weight = 1.5 * (len(self.options.rtt) - index - 1)
        for size in self.options.hosts:
            if size > count:
                weight += 1.5 * (size / count) ** 0.55 * len(self.options.rtt)
        return weight

    def rounds(self, fleet: Fleet, count: int, rtt: int, warm: bool, later: float) -> None:
        """``--repeat`` timed rounds (after an untimed warm-up if ``warm``) of every tool,
        interleaved, on ``fleet`` as it is reached (directly or through the delay proxy).

        The first timed round always runs; a further one only if, after it, ``--time-limit``
        still leaves one round for everything measured later (``later``, in rounds like this
        one's last: `later_weight`). So a tight limit gives fewer repeats everywhere rather
        than a missing column.
        """
        tools = self.tools()
        for tool in tools:
            tool.prepare(fleet, count)
        series = {
            (tool.name, kind): Series(tool.name, count, kind)
            for tool in tools
            for kind in (("change", "rerun") if tool.changes_files else ("connect",))
        }
        # In the results at once, filled as rounds end: a run stopped midway keeps them.
        self.results.series.update({(t, count, rtt, k): s for (t, k), s in series.items()})
        where = f"N={count} RTT={rtt} ms"
        last = 0.0
        for round_ in range(0 if warm else 1, self.options.repeat + 1):
            if round_ > 1 and self.remaining() < last * (1 + later):
                self.log(f"time limit: {round_ - 1} timed round(s) at {where}")
                self.results.notes.append(
                    f"{where}: {round_ - 1} timed round(s) of {self.options.repeat} "
                    "(what was left of --time-limit was kept for the other RTTs and sizes)"
                )
                break
            began = time.monotonic()
            for tool in tools:
                attempts = measure(tool, fleet, count, self.options.placement)
                label = f"round {round_}" if round_ else "warm-up"
                for attempt in attempts:
                    series[(tool.name, attempt.kind)].add(attempt, label, timed=round_ > 0)
                    if attempt.failed or attempt.wrong:
                        self.keep_log(tool.name, count, f"rtt{rtt}-{label}", attempt)
                if tool.changes_files and len(attempts) == 1 and round_:
                    series[(tool.name, "rerun")].skipped += 1
                self.log(
                    f"{where} {label} {tool.name}: "
                    + " / ".join(
                        f"{a.kind} {a.outcome.seconds:.2f} s"
                        + (" FAILED" if a.failed else " WRONG" if a.wrong else "")
                        for a in attempts
                    )
                )
            last = time.monotonic() - began

    def keep_log(self, tool: str, count: int, label: str, attempt: Attempt) -> None:
        """Save a bad run's whole output under the cache, for whoever investigates it."""
        self.logs.mkdir(parents=True, exist_ok=True)
        name = f"{tool}-n{count}-{label.replace(' ', '')}-{attempt.kind}.log"
        outcome = attempt.outcome
        (self.logs / name).write_text(
            f"exit status {outcome.exit_status} after {outcome.seconds:.2f} s\n"
            + "".join(f"wrong: {w}\n" for w in attempt.wrong)
            + f"--- stdout\n{outcome.stdout}\n--- stderr\n{outcome.stderr}\n"
        )
        if str(self.logs) not in " ".join(self.results.notes):
            self.results.notes.append(
                f"the output of every failed or wrong run is in `{self.logs}`"
            )

    def main(self) -> int:
        spent: dict[int, float] = {}
        base = self.base
        deploy_extras.check_delay(self.options.rtt, self.results)
        try:
            for count in self.options.hosts:
                # Small fleets cost mostly start-up, so only sizes >= 10 predict larger ones
                # (linearly: ansible's time grows with N); the repeat loop has its own check.
                scalable = [n for n in spent if n >= SCALABLE]
                if scalable:
                    last = max(scalable)
                    estimate = spent[last] * count / last
                    if estimate > self.remaining():
                        why = (
                            f"estimated {estimate:.0f} s (from N={last}), "
                            f"{max(0.0, self.remaining()):.0f} s left of --time-limit"
                        )
                        self.results.skipped[count] = why
                        self.log(f"skipping N={count}: {why}")
                        continue
                self.settle(count)
                began = time.monotonic()
                try:
                    self.size(count, base / f"n{count}")
                except SystemExit as exc:
                    if exc.code != 128 + signal.SIGTERM:
                        raise
                    # A hard stop from outside (e.g. `timeout`): keep what was measured.
                    self.log(f"SIGTERM during N={count}: writing what was measured")
                    self.interrupted = f"stopped by SIGTERM during N = {count}"
                    break
                spent[count] = time.monotonic() - began
                self.log(f"N={count} done in {spent[count]:.0f} s")
        finally:
            if self.baseline is not None:
                remove_worktree(base / "baseline")
            shutil.rmtree(base, ignore_errors=True)
        if self.interrupted:
            self.results.skipped[0] = self.interrupted
            self.results.notes.append(
                f"the run was {self.interrupted}; the tables show what had been measured"
            )
        self.results.facts = machine.describe(REPO, self.toolchain, self.load_at_start)
        self.results.spent = spent
        out: Path = self.options.out
        out.parent.mkdir(parents=True, exist_ok=True)
        picture = out.with_suffix(".png")
        if draw(self.results, picture):
            self.results.plot = picture.name
            self.log(f"wrote {picture}")
        else:
            self.results.notes.append(
                "no plot: matplotlib is not installed (`pip install -e '.[bench]'`)"
            )
        out.write_text(render(self.results) + kept_sections(out))
        self.log(f"wrote {out}")
        return 0 if self.results.all_ok() else 1


#: Sections of the page written by other runs (``--scale``: `bench.scale`; what was read from
#: it and `bench.ablate`'s, by hand), kept when the page is regenerated.
KEPT = ("## Fleet scale", "## Findings at 100 and 200 hosts", "## Ablation")


def kept_sections(page: Path) -> str:
    """The `KEPT` sections of the page as it is now (each up to the next ``## `` heading)."""
    try:
        text = page.read_text()
    except OSError:
        return ""
    out = ""
    for heading in KEPT:
        start = text.find("\n" + heading)
        if start < 0:
            continue
        end = text.find("\n## ", start + 1)
        out += "\n" + text[start + 1 : end if end >= 0 else len(text)].rstrip("\n") + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--ablate"]:  # each speed mechanism off against all on (`bench.ablate`)
        from bench import ablate

        return ablate.main(argv[1:])
    options = parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    os.environ.pop("SSH_AUTH_SOCK", None)
    try:
        if options.scale:  # the 100/200-host section only (`bench.scale`)
            from bench import scale

            return scale.main(options, argv)
        return Bench(options, argv).main()
    except (
        toolchain.ToolchainError,
        SandboxError,
        BaselineError,
        subprocess.SubprocessError,
        OSError,
    ) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
