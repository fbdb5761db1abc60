"""The server a restart wants, and the reach and import checks around it (issue 12: 1-4)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.config.services import ServiceSpec
from deploy.services.desired import Changes, desired, imports_problem, reach_problem
from deploy.services.state import ServiceState
from deploy.steps.service import RestartArgs

RUNNING = ServiceState(
    running=True,
    pid=10,
    pgid=10,
    sid=10,
    argv=["python3", "-m", "sglang.launch_server", "--tp=2", "--host", "0.0.0.0"],
    cwd="/srv",
    env={"HF_TOKEN": "hf_x", "PYTHONPATH": "/src"},
    origin="adopted",
    listen=["0.0.0.0:30000"],
)
SPEC = ServiceSpec(
    command="python3 -m sglang.launch_server --tp 8 --speculative-algorithm EAGLE3",
    env={"PYTHONPATH": ""},
    cwd="/root",
)


def restart(**changes: Any) -> Changes:
    return RestartArgs.model_validate({"service": "sglang", **changes}).changes()


def test_running_server_plus_declared_changes() -> None:
    want = desired(
        RUNNING,
        restart(
            args={"set": {"--speculative-algorithm": "EAGLE3"}},
            env={"set": {"SGLANG_X": "1", "PYTHONPATH": ""}, "unset": ["HF_TOKEN"]},
        ),
        SPEC,
    )
    assert want.source == "running server" and not want.satisfied
    assert want.argv == [*RUNNING.argv, "--speculative-algorithm", "EAGLE3"]
    assert want.env == {"PYTHONPATH": "/src", "SGLANG_X": "1"}, "'' never wipes PYTHONPATH"
    assert want.cwd == "/srv"
    assert want.reach == ["0.0.0.0:30000"]
    assert "-HF_TOKEN=***" in want.diff and "hf_x" not in want.diff


def test_a_server_that_already_runs_as_desired_is_satisfied() -> None:
    want = desired(
        RUNNING,
        restart(args={"set": {"--tp-size": 2, "--host": "0.0.0.0"}, "allow_move": True}),
        SPEC,
    )
    assert want.satisfied
    assert want.reach_note.startswith("--host/--port changed on purpose")


def test_no_server_falls_back_to_the_command_template() -> None:
    want = desired(ServiceState(running=False), restart(args={"remove": ["--tp"]}), SPEC)
    assert want.source == "command template"
    assert want.command == "python3 -m sglang.launch_server --speculative-algorithm EAGLE3"
    assert want.env == {} and want.cwd == "/root"
    assert not want.satisfied and want.reach == []
    unchanged = desired(ServiceState(running=False), restart(), SPEC)
    assert unchanged.command == SPEC.command, "no change: the template is kept as written"


def test_systemd_is_satisfied_while_running() -> None:
    unit = ServiceSpec(manager="systemd", unit="sglang.service")
    assert desired(ServiceState(running=True, origin="systemd"), restart(), unit).satisfied
    assert not desired(ServiceState(running=False), restart(), unit).satisfied


@pytest.mark.parametrize(
    ("before", "now", "problem"),
    [
        (["0.0.0.0:30000"], ["0.0.0.0:30000"], None),
        (["0.0.0.0:30000"], ["0.0.0.0:30000", "[::]:30000"], None),
        (["0.0.0.0:30000"], ["127.0.0.1:30000"], "now listens on 127.0.0.1:30000, not on 0.0.0.0"),
        (["[::]:30000"], [], "now listens on nothing, not on [::]:30000"),
    ],
)
def test_reach(before: list[str], now: list[str], problem: str | None) -> None:
    found = reach_problem("sglang", before, now)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_imports_problem_names_both_paths() -> None:
    ok = {"module": "m", "ok": True}
    wrong: dict[str, Any] = {
        "module": "sglang.srt.models.kimi_k25",
        "ok": False,
        "python": "/venv/bin/python",
        "cwd": "/root",
        "origin_real": "/venv/lib/site-packages/sglang/srt/models/kimi_k25.py",
        "expected_real": "/root/sglang/python/sglang/srt/models/kimi_k25.py",
    }
    assert imports_problem({"source": "pid 1", "results": [ok]}) is None
    message = imports_problem({"source": "pid 1", "results": [ok, wrong]})
    assert message is not None
    assert wrong["origin_real"] in message and wrong["expected_real"] in message
    missing = imports_problem(
        {"source": "pid 1", "results": [{**wrong, "origin_real": None, "error": "No module"}]}
    )
    assert missing is not None and "is not found (No module)" in missing
    assert imports_problem({"error": "cannot read the environment of pid 7"}) is not None
