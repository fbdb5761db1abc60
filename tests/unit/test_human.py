"""deploy.report.human's pure helpers and the rollback prompt: colour choice, host prefixes,
tables fitted to a width, and the question ``deploy rollback`` asks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from deploy.config.inventory import HostSpec
from deploy.engine import history, rollback_target
from deploy.engine.results import HostResult, RunResult, StepResult
from deploy.report.human import render_summary, use_colour
from deploy.report.text import own, shorten_middle, table_lines


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("env", "choice", "expected"),
    [
        ({}, "auto", True),
        ({"NO_COLOR": "1"}, "auto", False),
        ({"TERM": "dumb"}, "auto", False),
        ({"NO_COLOR": "1", "TERM": "dumb"}, "always", True),
        ({}, "never", False),
    ],
)
def test_use_colour(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], choice: str, expected: bool
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert use_colour(_Tty(), choice) is expected
    assert use_colour(io.StringIO(), "auto") is False, "not a terminal"


def test_own_drops_the_hosts_own_prefixes() -> None:
    assert own("gpu-dead", "gpu-dead: cannot connect") == "cannot connect"
    assert own("gpu-dead", "not attempted: gpu-dead: refused") == "not attempted: refused"
    assert own("gpu-1", "gpu-10: other host") == "gpu-10: other host"


def test_shorten_middle_keeps_both_ends() -> None:
    path = "/root/sglang/python/sglang/srt/models/kimi_k25.py"
    short = shorten_middle(path, 30)
    assert len(short) == 30 and short.startswith("/root/sg") and short.endswith("kimi_k25.py")
    assert "…" in short
    assert shorten_middle(path, 200) == path


def test_tables_fit_the_width_by_shortening_the_shrinkable_columns() -> None:
    rows = [["gpu-1", "changed", "/x" * 80, "1.00 s"]]
    lines = table_lines(["HOST", "OUTCOME", "FILES", "TIME"], rows, shrink=(2,), width=60)
    assert all(len(line) <= 60 for line in lines), lines
    assert lines[1].startswith("gpu-1  changed  /x") and lines[1].endswith("1.00 s")


def _check_run(*outcomes: str, detailed: bool = False) -> RunResult:
    hosts = [HostResult(host=f"gpu-{i}", outcome=o) for i, o in enumerate(outcomes, 1)]  # type: ignore[arg-type]
    return RunResult(
        "r1",
        "check",
        "kimi",
        "2026-11-30T00:00:00+00:00",
        True,
        hosts,
        1.0,
        detailed_exitcode=detailed,
    )


def test_check_summary_counts_pending_hosts_and_exit_5() -> None:
    assert _check_run("would change", "unchanged").exit_code == 0
    run = _check_run("would change", "unchanged", detailed=True)
    assert run.exit_code == 5
    assert "exit 5 (1 host(s) would change; nothing was changed)" in render_summary(run)
    assert _check_run("unchanged", detailed=True).exit_code == 0
    assert _check_run("would change", "not attempted", detailed=True).exit_code == 4


def test_rollback_question_names_run_playbook_files_and_services(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inventory = tmp_path / "hosts.yaml"
    steps = [
        StepResult(1, "python_insert", "Add the methods", "changed"),
        StepResult(4, "restart", "Restart SGLang with EAGLE-3", "ok"),
    ]
    host = HostResult("gpu-1", "changed", steps, changed_files=["/srv/kimi_k25.py"], run_id="r2")
    run = RunResult("r2", "apply", "kimi-eagle3", "2026-11-30T20:37:00+00:00", hosts=[host])
    run.inventory = str(inventory.resolve())
    history.save(run)
    hosts = [("gpu-1", HostSpec()), ("gpu-2", HostSpec())]

    target = rollback_target.choose(None, str(inventory.resolve()), hosts)
    question = target.describe()

    assert target.run_id == "r2"
    assert [name for name, _ in target.hosts] == ["gpu-1"], "only the hosts the run touched"
    assert question.startswith("Roll back run r2\n")
    assert "playbook: kimi-eagle3, started 2026-11-30T20:37:00+00:00" in question
    assert "hosts:    gpu-1\n" in question
    assert "files:    /srv/kimi_k25.py" in question
    assert "services: gpu-1: Restart SGLang with EAGLE-3" in question
    other = rollback_target.choose(None, str((tmp_path / "other.yaml").resolve()), hosts)
    assert other.run_id is None, "another inventory's runs are never the default"
