"""Timing whole processes, and checking after each one (untimed) that the job was done.

A sample is the wall time of one process from ``fork`` to exit, as an operator sees it:
interpreter start, imports, connections, the work, teardown; with it, what the process tree
cost the workstation — CPU-seconds and peak memory (`bench.usage`). Files are reset before every
change run and checked after it; the re-run starts from what the change run left (that is the
point of a re-run) and must leave every byte as it found it and make no new backup.

Two kinds of bad run are kept apart, because they mean different things:

- a **failed** run exited non-zero: the tool said so, nothing is hidden; its time is not a
  sample, and the reason (the lines of its output that say what failed) is reported;
- a **wrong** run exited 0 but the files say otherwise (methods outside the class, no backup,
  a "no-change" re-run that changed something): the tool lied, and it is reported as WRONG
  instead of being ranked.

A re-run after a change run that failed is not a no-change re-run (the failed hosts were
rolled back and have work to do), so it is skipped for that round.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field

from bench.fleet import Fleet
from bench.pinning import Placement
from bench.tools import Command, Tool
from bench.usage import TreeSampler, cpu_children
from bench.workload import check_patched

RUN_TIMEOUT = 300.0
#: Seconds a run is given per host beyond `RUN_TIMEOUT`'s (200 hosts on one loaded core: 4 min for the floor).
RUN_TIMEOUT_PER_HOST = 5.0
#: Lines of a tool's output that say why it failed (the rest is progress chatter).
_TELLING = re.compile(
    r"fail|error|rolled back|not attempted|unreachable|timed out|refused|traceback|exception"
    r"|no answer",
    re.IGNORECASE,
)
#: Of those, the ones that say why (a host's error line) rather than what (a summary row).
_WHY = re.compile(r"error|timed out|refused|traceback|exception|no answer|lost", re.IGNORECASE)


@dataclass
class Outcome:
    """One timed process."""

    seconds: float
    exit_status: int
    stdout: str
    stderr: str
    #: User + system CPU-seconds of the whole process tree (`bench.usage`).
    cpu: float = 0.0
    #: The largest summed RSS of the tree's processes at one sample, in bytes.
    peak_rss: int = 0

    def reason(self, lines: int = 3) -> str:
        """The output lines that say what went wrong (else the last ones), joined."""
        text = [line.strip() for line in (self.stdout + "\n" + self.stderr).splitlines()]
        text = [line for line in text if line]
        telling = [line for line in text if _TELLING.search(line)]
        telling.sort(key=lambda line: not _WHY.search(line))  # stable: the causes first
        chosen = telling[:lines] if telling else text[-lines:]
        return " / ".join(chosen) or f"exit status {self.exit_status}, no output"


@dataclass
class Attempt:
    """One run of one kind within a round: its outcome and what the checks found."""

    kind: str
    outcome: Outcome
    wrong: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.outcome.exit_status != 0


@dataclass
class Series:
    """The samples of one tool, one fleet size, one kind of run (change or re-run)."""

    tool: str
    hosts: int
    kind: str
    seconds: list[float] = field(default_factory=list)
    #: CPU-seconds and peak summed RSS (bytes) of the same runs, in the same order.
    cpu: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    #: Runs that exited non-zero: "round R: reason".
    failures: list[str] = field(default_factory=list)
    #: Runs that exited 0 with a wrong result: "round R: what is wrong".
    wrong: list[str] = field(default_factory=list)
    #: Re-runs not made because the round's change run failed.
    skipped: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.seconds) and not self.wrong

    @property
    def min(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def add(self, attempt: Attempt, label: str, timed: bool) -> None:
        """Record an attempt: a sample if it succeeded and ``timed``, else what went wrong."""
        if attempt.failed:
            self.failures.append(f"{label}: {attempt.outcome.reason()}")
        elif attempt.wrong:
            self.wrong.append(f"{label}: {'; '.join(attempt.wrong[:3])}")
        elif timed:
            self.seconds.append(attempt.outcome.seconds)
            self.cpu.append(attempt.outcome.cpu)
            self.rss.append(attempt.outcome.peak_rss)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu and self.ok else None

    @property
    def rss_median(self) -> float | None:
        return statistics.median(self.rss) if self.rss and self.ok else None


def run(command: Command, timeout: float = RUN_TIMEOUT) -> Outcome:
    """Start ``command`` in a session of its own and wait for it, sampling its tree's memory;
    a run past ``timeout`` is killed (its whole session) and reported."""
    cpu_before = cpu_children()
    began = time.perf_counter()
    proc = subprocess.Popen(
        command.argv,
        cwd=command.cwd,
        env=command.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    sampler = TreeSampler(proc.pid).start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        sampler.stop()
        return Outcome(
            time.perf_counter() - began,
            -1,
            stdout or "",
            f"timed out after {timeout:g} s",
            cpu_children() - cpu_before,
            sampler.peak,
        )
    seconds = time.perf_counter() - began
    sampler.stop()
    return Outcome(
        seconds,
        proc.returncode,
        stdout,
        stderr,
        cpu_children() - cpu_before,
        sampler.peak,
    )


def _backups(tool: Tool, fleet: Fleet) -> dict[str, list[str]]:
    return {h.name: [str(p) for p in tool.backups(fleet, h)] for h in fleet.hosts}


def change_wrong(tool: Tool, fleet: Fleet) -> list[str]:
    """What is wrong after a successful change run: each file's content, its backup."""
    if not tool.changes_files:
        return []
    problems = []
    for host in fleet.hosts:
        wrong = check_patched(fleet.model_file(host).read_bytes())
        if wrong:
            problems.append(f"{host.name}: {wrong}")
        copies = [p.read_bytes() for p in tool.backups(fleet, host)]
        if fleet.original not in copies:
            problems.append(f"{host.name}: no backup holding the original bytes")
    return problems


def rerun_wrong(
    tool: Tool, fleet: Fleet, before: dict[str, bytes], backups: dict[str, list[str]]
) -> list[str]:
    """What is wrong after a successful re-run: it must change nothing, backups included."""
    after, now = fleet.contents(), _backups(tool, fleet)
    return [f"{n}: the re-run changed the file" for n in before if after[n] != before[n]] + [
        f"{n}: the re-run made a new backup" for n in now if now[n] != backups[n]
    ]


def _timed(tool: Tool, fleet: Fleet, forks: int, placement: Placement) -> Outcome:
    command = tool.command(fleet, forks)
    try:
        timeout = max(RUN_TIMEOUT, RUN_TIMEOUT_PER_HOST * len(fleet.hosts))
        return run(Command(placement.argv(command.argv), command.cwd, command.env), timeout)
    finally:
        tool.after(command)


#: The tool and the hosts anywhere: the default of `measure`.
ANYWHERE = Placement()


def measure(
    tool: Tool, fleet: Fleet, forks: int, placement: Placement = ANYWHERE, rerun: bool = True
) -> list[Attempt]:
    """Reset, time a change run and check it; then, if it succeeded (and ``rerun``), time a
    re-run and check it. The floor makes one attempt of kind "connect". ``placement``: the
    cores the tool runs on (the hosts' are set beforehand, `Placement.apply_hosts`)."""
    fleet.reset()
    kind = "change" if tool.changes_files else "connect"
    first = Attempt(kind, _timed(tool, fleet, forks, placement))
    if not tool.changes_files:
        return [first]
    if first.failed:
        return [first]
    first.wrong = change_wrong(tool, fleet)
    if not rerun:
        return [first]
    before, backups = fleet.contents(), _backups(tool, fleet)
    second = Attempt("rerun", _timed(tool, fleet, forks, placement))
    if not second.failed:
        second.wrong = rerun_wrong(tool, fleet, before, backups)
    return [first, second]
