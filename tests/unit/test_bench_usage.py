"""What a timed run costs the workstation (bench/usage.py, bench/runner.py), and where it runs
(bench/pinning.py, the options): real processes, no mocks."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.options import parse
from bench.pinning import Placement, cpu_list, from_options, parse_cpus
from bench.runner import Outcome, run
from bench.tools import Command
from bench.usage import TreeSampler, resident_bytes, session_of


def test_the_session_is_read_after_the_last_parenthesis() -> None:
    # a command name may hold spaces and parentheses: fields are counted from the last ")"
    assert session_of("4242 (odd) name)) S 1 4242 4243 0 -1 4194560") == 4243
    assert session_of(Path("/proc/self/stat").read_text()) == os.getsid(0)


def test_resident_bytes_is_the_second_field_in_pages() -> None:
    assert resident_bytes("1000 250 10 1 0 80 0", page=4096) == 250 * 4096


def test_the_sampler_sums_every_process_of_the_session_and_nothing_else(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        sampler = TreeSampler(proc.pid, interval=0.01)
        deadline = time.monotonic() + 10
        while sampler.processes < 3 and time.monotonic() < deadline:
            sampler.sample()  # until the shell has forked both sleeps (a loaded machine: later)
            time.sleep(0.02)
        assert sampler.processes == 3  # sh and two sleeps; not this test's own process
        assert sampler.peak > 3 * 100 * 1024
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the shell and both sleeps
        proc.wait()


_GRANDCHILD = (
    "import subprocess, sys\n"
    "held = bytearray(40 * 2**20)\n"
    "code = 'b = bytearray(80 * 2**20); x = 0\\nfor i in range(2_000_000): x += i'\n"
    "subprocess.run([sys.executable, '-c', code], check=True)\n"
)


def test_a_run_counts_its_reaped_grandchild_cpu_and_memory(tmp_path: Path) -> None:
    outcome = run(Command([sys.executable, "-c", _GRANDCHILD], tmp_path, dict(os.environ)))
    assert outcome.exit_status == 0, outcome.stderr
    # the parent itself does next to nothing: the CPU is the grandchild's loop
    assert outcome.cpu > 0.05
    # the parent's 40 MiB and the grandchild's 80 MiB at once: a sum over the tree, where
    # the largest single process (ru_maxrss) would say ~90 MiB
    assert outcome.peak_rss > 120 * 2**20


def test_a_run_past_its_timeout_is_killed_with_its_session(tmp_path: Path) -> None:
    outcome = run(Command(["sh", "-c", "sleep 30 & sleep 30"], tmp_path, dict(os.environ)), 0.5)
    assert outcome.exit_status == -1 and "timed out" in outcome.stderr
    assert outcome.seconds < 10


@pytest.mark.parametrize(
    ("text", "cpus"), [("0", {0}), ("0,1", {0, 1}), ("0-1", {0, 1}), (" 1 ", {1})]
)
def test_cpu_lists_in_tasksets_format(text: str, cpus: set[int]) -> None:
    if max(cpus) >= (os.cpu_count() or 1):
        pytest.skip("needs two cores")
    assert parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-0", "-1", "9999"])
def test_bad_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_cpus(text)


def test_cpu_lists_fold_into_ranges() -> None:
    assert cpu_list({0, 1, 2, 5}) == "0-2,5"
    assert cpu_list([3]) == "3"


def test_pinning_needs_both_sides_apart() -> None:
    assert not from_options(None, None).pinned
    with pytest.raises(argparse.ArgumentTypeError, match="go together"):
        from_options(frozenset({0}), None)
    with pytest.raises(argparse.ArgumentTypeError, match="share CPU 0"):
        from_options(frozenset({0}), frozenset({0, 1}))


def test_a_pinned_client_really_runs_on_its_core(tmp_path: Path) -> None:
    placement = Placement(frozenset({0}), frozenset({1}))
    argv = placement.argv(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    )
    assert argv[:3] == ["taskset", "-c", "0"]
    outcome = run(Command(argv, tmp_path, dict(os.environ)))
    assert outcome.stdout.strip() == "[0]"
    assert Placement().argv(["x"]) == ["x"]
    assert "CPU 0" in placement.describe() and "CPU 1" in placement.describe()


def test_the_options_of_a_pinned_scale_run() -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    scale = ["--scale", "--hosts", "100,200", "--pin-client", "0", "--pin-hosts", "1"]
    options = parse([*scale, "--max-hosts", "ansible=50", "--deploy-workers", "2"])
    assert options.scale and options.hosts == [100, 200]
    assert options.placement == Placement(frozenset({0}), frozenset({1}))
    assert options.max_hosts == {"ansible": 50} and options.deploy_workers == 2
    later = parse([*scale, "--forks", "25", "--change-only", "--workers-ref", "fleet33"])
    assert later.forks == 25 and later.change_only and later.workers_ref == "fleet33"
    assert not parse([]).placement.pinned


@pytest.mark.parametrize(
    "argv", [["--pin-client", "0"], ["--max-hosts", "chef=3"], ["--max-hosts", "ansible"]]
)
def test_bad_scale_options_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2


def test_a_failed_runs_reason_puts_the_cause_before_the_summary_rows() -> None:
    output = (
        "HOST     OUTCOME        CHANGED  TIME\n"
        "gpu-01   not attempted  -        30.5 s\n"
        "gpu-68: no answer while taking the lock in /srv/state\n"
    )
    reason = Outcome(31.0, 4, output, "").reason(lines=2)
    assert reason == (
        "gpu-68: no answer while taking the lock in /srv/state / gpu-01   not attempted  -        30.5 s"
    )
