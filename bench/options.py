"""``python -m bench``'s command line: fleet sizes, round-trip times, tools, limits."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.deploybuild import REPO
from bench.pinning import from_options, parse_cpus
from bench.window import INITIAL_SEGMENTS, MSS

TOOLS = ("deploy", "ansible", "pyinfra", "fabric", "floor", "floor-nodelay")
#: The module docstring of `bench.__main__` gives the description (set by `parse`'s caller).
DESCRIPTION = "time deploy against ansible-core, pyinfra, a Fabric script and the floor"


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


def _cap(text: str) -> tuple[str, int]:
    """``TOOL=N`` of ``--max-hosts``."""
    tool, _, count = text.partition("=")
    if tool not in TOOLS or not count.isdigit():
        raise argparse.ArgumentTypeError(f"--max-hosts wants TOOL=N, TOOL among {', '.join(TOOLS)}")
    return tool, int(count)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
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
    parser.add_argument(
        "--baseline-ref",
        default=None,
        metavar="REV",
        help="also time deploy as of git revision REV (a temporary worktree, run with "
        "PYTHONPATH on it) in the same rounds: before/after ratios from one run",
    )
    parser.add_argument(
        "--initial-window",
        type=int,
        default=INITIAL_SEGMENTS,
        metavar="SEGMENTS",
        help="through the delay proxy, each connection's first TCP congestion window, in "
        f"segments of {MSS} bytes, growing by slow start as ACKs come back one RTT later "
        f"(bench/window.py; default {INITIAL_SEGMENTS}, as Linux; 0: latency only)",
    )
    parser.add_argument(
        "--wire-rtt",
        type=float,
        default=None,
        metavar="MS",
        help="the RTT at which every SSH message of one run of each kind is logged for "
        "'Where the round trips go' (default: the largest --rtt; 0: skip)",
    )
    parser.add_argument(
        "--pin-client",
        type=parse_cpus,
        default=None,
        metavar="CPUS",
        help="run the tool under test on these cores (taskset list, e.g. 0); with --pin-hosts",
    )
    parser.add_argument(
        "--pin-hosts",
        type=parse_cpus,
        default=None,
        metavar="CPUS",
        help="run the hosts' sshd daemons and their sessions on these cores (e.g. 1)",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="measure the 'Fleet scale' section only (loopback; unpinned, and pinned as well "
        "when --pin-client/--pin-hosts are given, in the same rounds) and write it into --out, "
        "keeping the rest of the page",
    )
    parser.add_argument(
        "--max-hosts",
        type=_cap,
        action="append",
        default=[],
        metavar="TOOL=N",
        help="do not run TOOL on fleets larger than N (the page says so), e.g. ansible=50",
    )
    parser.add_argument(
        "--forks",
        type=int,
        default=0,
        metavar="F",
        help="--scale: at most F hosts at a time for every tool (deploy and ansible --forks, "
        "pyinfra --parallel, the floor's and the Fabric script's threads); default: all hosts",
    )
    parser.add_argument(
        "--change-only",
        action="store_true",
        help="--scale: time the change runs only, no re-runs (when the time is short)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="PATH",
        help="--scale: write the section again from a run's raw figures (the .scale.json "
        "beside the page), measuring nothing",
    )
    parser.add_argument(
        "--deploy-workers",
        type=int,
        default=0,
        metavar="N",
        help="--scale: also time `deploy apply --workers N` (worker processes) in the rounds",
    )
    parser.add_argument(
        "--workers-ref",
        default=None,
        metavar="REV",
        help="--scale --deploy-workers: run that variant from git revision REV (a temporary "
        "worktree, PYTHONPATH on it), e.g. a branch that has --workers before it is merged",
    )
    options = parser.parse_args(argv)
    if options.initial_window < 0:
        parser.error("--initial-window wants a number of segments >= 0 (0: no window model)")
    try:
        options.placement = from_options(options.pin_client, options.pin_hosts)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    options.max_hosts = dict(options.max_hosts)
    return options
