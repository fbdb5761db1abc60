"""``python -m bench``: time deploy, ansible-core, pyinfra, a plain Fabric script and the
paramiko floor on N hosts, over loopback and through a network with a round-trip time.

Usage (from the repository root)::

    python -m bench --hosts 1,20 --rtt 0,50,100 --repeat 3 --time-limit 2400

For each fleet size it starts that many real sshd daemons on loopback, lays SGLang 0.5.9's
real ``kimi_k25.py`` on each, and then, for each round-trip time of ``--rtt`` (0 = straight
to the daemons; otherwise every tool, the floor included, reaches each host through
`bench.delay`'s proxy, which holds every chunk RTT/2 in each direction), ``--repeat`` times
and tool after tool (interleaved, so that a slow minute of the machine hurts every tool
alike): reset the files, time the change run, check every file with ``ast``, time the
no-change re-run, check nothing moved. One untimed warm-up round (at the first size and RTT
only: after it the caches stay warm) fills the page cache and the ``.pyc`` files of every
tool, so no tool pays for a cold disk. Then, on loopback, it records deploy's SSH operation
counts (``--json``) and profiles one deploy run of each kind, and finally times ``deploy
--help`` and ``deploy validate``. Before any of it, a ping-pong through the proxy proves that
it adds at least the RTT asked for.

The benchmark stops by itself: every process has a timeout, a fleet size whose estimated cost
exceeds what is left of ``--time-limit`` is skipped (and the report says so), and every sshd
daemon is stopped on the way out, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench import budget, machine, toolchain
from bench.costs import unit_prices
from bench.delay import DelayNetwork, ping_pong
from bench.fleet import Fleet, start_fleet, through
from bench.plot import draw
from bench.report import render
from bench.results import Results
from bench.runner import Attempt, Series, measure, run
from bench.tools import (
    AnsibleTool,
    Command,
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

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("deploy", "ansible", "pyinfra", "fabric", "floor", "floor-nodelay")
CLI_REPEAT = 10
SCALABLE = 10


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("--hosts wants positive integers, e.g. 1,20,50")
    return sizes


def _rtts(text: str) -> list[int]:
    try:
        rtts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        rtts = []
    if not rtts or rtts[0] < 0:
        raise argparse.ArgumentTypeError("--rtt wants milliseconds >= 0, e.g. 0,50,100")
    return rtts


def _tools(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(TOOLS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--tools: choose among {', '.join(TOOLS)}")
    return [name for name in TOOLS if name in names]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=_sizes, default=_sizes("1,20,50"), help="fleet sizes")
    parser.add_argument(
        "--rtt",
        type=_rtts,
        default=[0],
        help="round-trip times in ms, e.g. 0,50,100 (0: straight to the hosts on loopback)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per tool and size")
    parser.add_argument("--tools", type=_tools, default=list(TOOLS), help=",".join(TOOLS))
    parser.add_argument("--out", type=Path, default=REPO / "docs/performance.md")
    parser.add_argument(
        "--time-limit", type=float, default=1500.0, help="seconds for the whole benchmark"
    )
    parser.add_argument("--venv", type=Path, default=None, help="the anchors' venv (cached)")
    parser.add_argument(
        "--settle",
        type=float,
        default=60.0,
        help="before each fleet size, wait up to this many seconds for a quiet machine",
    )
    parser.add_argument(
        "--sftp",
        default="internal-sftp",
        help="the hosts' sshd SFTP subsystem: internal-sftp (default), or a program such as "
        "/usr/lib/openssh/sftp-server, which sshd starts through the login shell as on a "
        "stock Debian host",
    )
    return parser.parse_args(argv)


def deploy_executable() -> list[str]:
    """The installed ``deploy`` console script beside this interpreter, as operators run it;
    ``python -m deploy.cli`` if it is not installed."""
    script = Path(sys.executable).parent / "deploy"
    return [str(script)] if script.exists() else [sys.executable, "-m", "deploy.cli"]


def ensure_bytecode() -> str:
    """Compile deploy's modules to bytecode, as a regular ``pip install`` would have (untimed).

    An editable install (``pip install -e .``) leaves the sources uncompiled, and where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) nothing is ever cached: every
    ``deploy`` process then compiles its ~70 modules from source, ~40 ms that no installed copy
    pays — while the anchors in their venv were byte-compiled by pip. Measuring installed
    tools against installed tools is the only fair comparison.
    """
    package = REPO / "deploy"
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return f"`deploy`'s modules were byte-compiled before timing (`python -m compileall {package.relative_to(REPO)}`), as `pip install` does for the anchors"


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
        self.results = Results(
            sizes=[],
            rtts=options.rtt,
            tools=options.tools,
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
        return [made[name] for name in self.options.tools]

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
                with DelayNetwork(rtt) as network:
                    ports = {h.name: network.forward(h.port) for h in fleet.hosts}
                    view = through(fleet, ports, base / f"workstation-rtt{rtt}", REPO)
                    self.rounds(view, count, rtt, warm, later)
                    if network.errors:
                        self.results.notes.append(
                            f"N={count} RTT={rtt} ms: the delay proxy could not forward "
                            f"{len(network.errors)} connection(s): {network.errors[0]}"
                        )
            if "deploy" in self.options.tools:
                self.round_trips(fleet, count)
                self.profile(fleet, count)
                if count == self.options.hosts[0]:
                    self.cli_times(fleet)
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
                attempts = measure(tool, fleet, count)
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

    def check_delay(self) -> None:
        """A ping-pong through the proxy must take at least each RTT asked for (else the
        bench measures nothing): the measured values go into the report.

        Raises:
            OSError: the proxy adds less than the RTT.
        """
        measured = []
        for rtt in self.options.rtt:
            if rtt == 0:
                continue
            seconds = ping_pong(rtt)
            if seconds < rtt / 1000:
                raise OSError(
                    f"the delay proxy's ping-pong took {seconds * 1000:.1f} ms < {rtt} ms"
                )
            measured.append(f"{rtt} ms → {seconds * 1000:.1f} ms")
        if measured:
            self.results.notes.append(
                "the delay proxy (`bench/delay.py`, listening on 127.0.0.1 only) was checked "
                "before timing: a one-byte ping-pong through it took (fastest of 3) "
                + ", ".join(measured)
            )

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

    def round_trips(self, fleet: Fleet, count: int) -> None:
        """deploy's own per-host operation counts for a change run and a re-run (``--json``)."""
        fleet.reset()
        for kind in ("change", "rerun"):
            outcome = run(self.deploy.json_command(fleet, count))
            try:
                report = json.loads(outcome.stdout)
                self.results.ops[(count, kind)] = [
                    {"host": h["host"], "outcome": h["outcome"], **h.get("ops", {})}
                    for h in report["hosts"]
                ]
            except (ValueError, KeyError, TypeError):
                self.results.notes.append(
                    f"N={count} {kind}: no ops from `deploy --json` ({outcome.reason()})"
                )

    def profile(self, fleet: Fleet, count: int) -> None:
        """One instrumented deploy run of each kind (see bench/profile.py), with its wall time."""
        fleet.reset()
        for kind in ("change", "rerun"):
            args = self.deploy.command(fleet, count).argv[len(self.deploy.executable) :]
            command = Command(
                [sys.executable, "-m", "bench.profile", str(fleet.workdir), *args],
                REPO,
                fleet.env(),
            )
            outcome = run(command)
            try:
                document: dict[str, Any] = json.loads(outcome.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                self.results.notes.append(f"N={count} {kind}: profile failed ({outcome.reason()})")
                continue
            document["wall"] = outcome.seconds
            self.results.profiles[(count, kind)] = document

    def cli_times(self, fleet: Fleet) -> None:
        """``deploy --help`` and ``deploy validate``: start-up cost, no host contacted."""
        for label, args in (("--help", ["--help"]), ("validate", ["validate", "-i", "hosts.yaml"])):
            series = Series("deploy", 0, label)
            for _ in range(CLI_REPEAT):
                command = Command([*self.deploy.executable, *args], fleet.workdir, fleet.env())
                outcome = run(command, timeout=60)
                series.seconds.append(outcome.seconds)
                if outcome.exit_status != 0:
                    series.failures.append(f"exit status {outcome.exit_status}: {outcome.reason()}")
            self.results.cli[label] = series

    def main(self) -> int:
        spent: dict[int, float] = {}
        base = Path(tempfile.mkdtemp(prefix="deploy-bench-"))
        self.check_delay()
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
        out.write_text(render(self.results))
        self.log(f"wrote {out}")
        return 0 if self.results.all_ok() else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    os.environ.pop("SSH_AUTH_SOCK", None)
    try:
        return Bench(options, argv).main()
    except (toolchain.ToolchainError, SandboxError, subprocess.SubprocessError, OSError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
