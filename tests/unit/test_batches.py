"""Rolling batches and the fleet runner's pacing, without SSH (issue 4).

`run_apply` is driven with a stand-in for `apply_host`, so batches, ``max_fail``, ``--forks``
and ``--timeout`` are checked in milliseconds; the same behaviours over real sshd are in
tests/integration/test_fleet.py and test_crash_recovery.py.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from deploy.engine import fleet
from deploy.engine.batches import (
    Size,
    exceeds,
    fleet_state,
    parse_max_fail,
    parse_serial,
    plan_batches,
)
from deploy.engine.host_run import RunOptions
from deploy.engine.results import HostResult, RunResult
from deploy.errors import InputError

NAMES = [f"h{i}" for i in range(1, 11)]


@pytest.mark.parametrize(
    ("serial", "expected"),
    [
        (None, [10]),
        ("1", [1] * 10),
        ("3", [3, 3, 3, 1]),
        ("30%", [3, 3, 3, 1]),
        ("5%", [1] * 10),  # rounds down, but never below one host
        ("100%", [10]),
        ("1,50%", [1, 5, 4]),  # a canary, then halves
        ([1, 2, "40%"], [1, 2, 4, 3]),
        (["25 %"], [2, 2, 2, 2, 2]),
    ],
)
def test_plan_batches(serial: Any, expected: list[int]) -> None:
    batches = plan_batches(NAMES, parse_serial(serial) if serial is not None else None)
    assert [len(b) for b in batches] == expected
    assert [name for batch in batches for name in batch] == NAMES, "inventory order kept"


@pytest.mark.parametrize("bad", ["0", "abc", "150%", "", "-1", "1,,x", True, []])
def test_bad_serial_is_an_input_error(bad: Any) -> None:
    with pytest.raises(InputError, match="serial"):
        parse_serial(bad)


@pytest.mark.parametrize(
    ("limit", "failures", "size", "stop"),
    [
        ("0", 0, 5, False),
        ("0", 1, 5, True),
        ("2", 2, 5, False),
        ("2", 3, 5, True),
        ("20%", 1, 5, False),  # exactly 20% is allowed
        ("20%", 2, 5, True),
        ("50%", 1, 2, False),
        ("0%", 1, 10, True),
        ("100%", 5, 5, False),
    ],
)
def test_exceeds(limit: str, failures: int, size: int, stop: bool) -> None:
    assert exceeds(failures, size, parse_max_fail(limit)) is stop


def test_fleet_state_groups_hosts_by_where_they_ended() -> None:
    run = RunResult("r", "apply", "p", "t")
    outcomes = ["changed", "unchanged", "rolled back", "failed", "skipped", "not attempted"]
    run.hosts = [HostResult(f"h{i}", o) for i, o in enumerate(outcomes)]  # type: ignore[arg-type]
    assert fleet_state(run) == {
        "new state": ["h0", "h1"],
        "rolled back": ["h2"],
        "failed, nothing changed": ["h3"],
        "never touched": ["h4", "h5"],
    }


# -- the runner, with a stand-in for one host's run ---------------------------------------------


@dataclass
class _Plan:
    name: str


class _FakeHosts:
    """Plays `apply_host`: an outcome and a duration per host; records concurrency."""

    def __init__(self, outcomes: dict[str, str], seconds: dict[str, float] | None = None) -> None:
        self.outcomes = outcomes
        self.seconds = seconds or {}
        self.started: list[str] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, plan: _Plan, options: RunOptions) -> HostResult:
        with self._lock:
            self.started.append(plan.name)
            self.running += 1
            self.most = max(self.most, self.running)
        options.progress.step_started(plan.name, 0, "the only step")
        time.sleep(self.seconds.get(plan.name, 0.01))
        with self._lock:
            self.running -= 1
        return HostResult(plan.name, self.outcomes.get(plan.name, "changed"))  # type: ignore[arg-type]


def _run(
    monkeypatch: pytest.MonkeyPatch, hosts: _FakeHosts, count: int, **kwargs: Any
) -> RunResult:
    monkeypatch.setattr(fleet, "apply_host", hosts)
    plans = [_Plan(name) for name in NAMES[:count]]
    return fleet.run_apply(plans, RunOptions(run_id="r", playbook="p"), **kwargs)  # type: ignore[arg-type]


def test_batches_stop_when_max_fail_is_exceeded(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = _FakeHosts({"h3": "rolled back", "h4": "not attempted"})
    run = _run(monkeypatch, hosts, 8, serial=parse_serial("2"), max_fail=Size(1))
    assert sorted(hosts.started) == ["h1", "h2", "h3", "h4"], "batch 3 and 4 never started"
    assert [h.outcome for h in run.hosts[4:]] == ["skipped"] * 4
    assert run.stopped is not None and run.stopped.startswith("batch 2 of 4: 2 of 2 host(s)")
    assert run.batches == [["h1", "h2"], ["h3", "h4"], ["h5", "h6"], ["h7", "h8"]]
    assert run.exit_code == 1, "a rolled-back host outranks skipped ones (exit 4)"


def test_default_max_fail_with_batches_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(monkeypatch, _FakeHosts({"h1": "failed"}), 3, serial=parse_serial("1"))
    assert [h.outcome for h in run.hosts] == ["failed", "skipped", "skipped"]


def test_the_last_batch_failing_stops_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(monkeypatch, _FakeHosts({"h3": "failed"}), 3, serial=parse_serial("2"))
    assert [h.outcome for h in run.hosts] == ["changed", "changed", "failed"]
    assert run.stopped is None


def test_check_mode_ignores_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = _FakeHosts({"h1": "failed"})
    monkeypatch.setattr(fleet, "apply_host", hosts)
    options = RunOptions(run_id="r", playbook="p", check_mode=True)
    plans = [_Plan(name) for name in NAMES[:3]]
    run = fleet.run_apply(plans, options, serial=parse_serial("1"))  # type: ignore[arg-type]
    assert len(hosts.started) == 3 and run.batches == []


def test_forks_bound_the_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = _FakeHosts({}, {name: 0.05 for name in NAMES})
    run = _run(monkeypatch, hosts, 10, forks=3)
    assert hosts.most == 3 and run.exit_code == 0


def test_timeout_skips_unstarted_hosts_and_cancels_running_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 13: the deadline cancels a busy host (it rolls back) instead of abandoning it."""
    seen: dict[str, str] = {}

    def slow(plan: _Plan, options: RunOptions) -> HostResult:
        if plan.name != "h2":
            return HostResult(plan.name, "changed")
        deadline = time.monotonic() + 5.0
        while not options.cancel.is_set():  # what a host does between steps
            assert time.monotonic() < deadline, "never cancelled"
            time.sleep(0.01)
        seen["reason"] = options.cancel.reason
        return HostResult(plan.name, "rolled back", error=options.cancel.reason)

    monkeypatch.setattr(fleet, "apply_host", slow)
    plans = [_Plan(name) for name in NAMES[:4]]
    began = time.monotonic()
    run = fleet.run_apply(plans, RunOptions(run_id="r"), forks=1, timeout=0.3)  # type: ignore[arg-type]
    took = time.monotonic() - began
    assert took < 2.0, f"cancelled at the deadline, not after the slow host ({took:.1f} s)"
    assert [h.outcome for h in run.hosts] == ["changed", "rolled back", "skipped", "skipped"]
    assert seen["reason"] == "--timeout 0.3 s expired"
    assert run.stopped is not None and "--timeout 0.3 s expired" in run.stopped
    assert run.exit_code == 1


def test_an_exception_in_a_host_is_a_host_a_human_must_look_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(plan: _Plan, options: RunOptions) -> HostResult:
        if plan.name == "h2":
            raise RuntimeError("boom")
        return HostResult(plan.name, "changed")

    monkeypatch.setattr(fleet, "apply_host", explode)
    plans = [_Plan(name) for name in NAMES[:3]]
    run = fleet.run_apply(plans, RunOptions(run_id="r"))  # type: ignore[arg-type]
    assert [h.outcome for h in run.hosts] == ["changed", "rollback failed", "changed"]
    assert "a bug in deploy" in (run.hosts[1].error or "")


def test_listeners_fan_out_and_run_events_are_optional() -> None:
    seen: list[str] = []

    class Full:
        def host_event(self, host: str, message: str) -> None:
            seen.append(f"full {host} {message}")

        def step_started(self, host: str, index: int, title: str) -> None:
            seen.append(f"full start {host}")

        def step_finished(self, host: str, result: Any) -> None:
            pass

        def run_event(self, message: str) -> None:
            seen.append(f"full run {message}")

    class Minimal(Full):
        run_event = None  # type: ignore[assignment]

    both = fleet.Listeners(Full(), Minimal(), None)
    both.host_event("h1", "hello")
    both.run_event("batch 1 of 2")
    assert seen == ["full h1 hello", "full h1 hello", "full run batch 1 of 2"]
