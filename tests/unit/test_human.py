"""deploy.report.human's pure helpers and the rollback prompt: colour choice, host prefixes,
tables fitted to a width, and the question ``deploy rollback`` asks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from deploy.config.inventory import HostSpec
from deploy.engine import history, rollback_target
from deploy.engine.results import HostResult, RunResult, StepResult
from deploy.report.human import render_plan, render_summary, use_colour
from deploy.report.progress import ProgressPrinter
from deploy.report.records import render_history, render_rollback_question, render_status
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
    question = render_rollback_question(target, width=None)

    assert target.run_id == "r2"
    assert [name for name, _ in target.hosts] == ["gpu-1"], "only the hosts the run touched"
    assert question.startswith("Roll back run r2\n")
    assert "playbook: kimi-eagle3, started 2026-11-30T20:37:00+00:00" in question
    assert "hosts:    gpu-1\n" in question
    assert "files:    /srv/kimi_k25.py" in question
    assert "services: Restart SGLang with EAGLE-3\n" in question
    other = rollback_target.choose(None, str((tmp_path / "other.yaml").resolve()), hosts)
    assert other.run_id is None, "another inventory's runs are never the default"


# --- issue 34, point 4: every line fits an 80-column terminal -------------------------------

NODE1 = "gpu-node-01.dc2.example.internal"
NODE2 = "gpu-node-02.dc2.example.internal"
MODEL = "/opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/models/kimi_k25.py"
GATE_FIGURES = {
    "tokens_per_s": 95.5, "tokens_per_s_c1": 95.5, "tokens_per_s_c4": 378.2,
    "before_tokens_per_s": 53.9, "before_tokens_per_s_c1": 53.9, "before_tokens_per_s_c4": 215.2,
    "ratio": 1.773, "ratio_c1": 1.773, "ratio_c4": 1.757,
}  # fmt: skip


def _fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, long


def _gate_run() -> RunResult:
    def host(name: str, outcome: str, gate: str) -> HostResult:
        steps = [
            StepResult(0, "backup", "Save the model file", "ok", f"copy of {MODEL} saved"),
            StepResult(
                7,
                "gate_throughput",
                "At least as fast as the server it replaced",
                gate,  # type: ignore[arg-type]
                "concurrency 1: 95.5 tok/s vs 53.9 before (x1.77)",
                figures=dict(GATE_FIGURES),
            ),
        ]
        undo = [f"restored {MODEL} (sha256 e80e1823f0a9)"] if outcome == "rolled back" else []
        return HostResult(
            name, outcome, steps, changed_files=[MODEL], duration=21.93, rollback=undo,  # type: ignore[arg-type]
            error="throughput gate failed for sglang: 95.5 tok/s at concurrency 1 is below the "
            "floor of 1000" if outcome == "rolled back" else None,
        )  # fmt: skip

    return RunResult(
        "20261204T192516.522356Z-f66fa6",
        "apply",
        "kimi-eagle3",
        "2026-12-04T19:25:16.681727+00:00",
        hosts=[host(NODE1, "changed", "ok"), host(NODE2, "rolled back", "failed")],
        duration=21.94,
    )


def test_summary_fits_keeps_the_gate_headline_and_moves_paths_and_figures_to_verbose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "dumb")
    text = render_summary(_gate_run(), width=80)
    _fits(text)
    lines = text.splitlines()
    row = lines.index(next(line for line in lines if line.startswith(f"{NODE1}  changed")))
    assert (
        lines[row + 1] == "  gate: c1 95.5 tok/s (x1.77 of 53.9), c4 378.2 tok/s (x1.76 of 215.2)"
    )
    assert any(line.startswith("  gate failed: c1 95.5 tok/s") for line in lines)
    assert "kimi_k25.py" in lines[row] and MODEL not in text and "tokens_per_s" not in text
    assert "below the floor of 1000" in text.replace("\n    ", " "), "wrapped, never cut"
    assert "…" not in text and "..." in text, "the undo line's path, shortened for TERM=dumb"

    verbose = render_summary(_gate_run(), width=80, verbose=True)
    assert f"  changed {MODEL}\n" in verbose and verbose.count(MODEL) == 3, "whole with -v"
    assert "tokens_per_s_c1=95.5" in verbose and "ratio_c4=1.757" in verbose
    assert "tokens_per_s=" not in verbose and "ratio=" not in verbose, "no figure said twice"


def test_progress_lines_fit_and_keep_host_names_whole() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, colour=False, width=80)
    long_title = "Restart SGLang with EAGLE-3 (if the file changed or the server runs without it)"
    ok = StepResult(
        4, "restart", long_title, "ok", "a file changed: stopped pid 5306; " * 3, duration=10.1
    )
    printer.step_finished(NODE1, ok)
    printer.step_finished(
        NODE1, StepResult(0, "backup", "Save", "ok", f"{NODE1}: saved", duration=0.0)
    )  # an error raised on the host names it; the line starts with its name already
    failed = StepResult(7, "gate_throughput", "Gate", "failed", "why it failed " * 10, duration=4.7)
    printer.step_finished(NODE2, failed)
    printer.host_event(NODE2, "draining sglang (pid 7048): up to 300 s for its requests in flight")
    text = out.getvalue()
    _fits(text)
    lines = text.splitlines()
    assert lines[0].startswith(f"{NODE1}: [5] Restart SGLang") and lines[0].endswith(
        ": ok (10.10 s)"
    )
    assert "stopped pid" not in text, "a summary that does not fit waits for -v"
    assert lines[1] == f"{NODE1}: [1] Save: ok (0.00 s) saved", "one that fits stays"
    assert lines[2] == f"{NODE2}: [8] Gate: failed (4.70 s)" and lines[3].startswith("    why it")
    assert text.replace("\n    ", " ").count("why it failed") == 10, "wrapped, not cut"
    assert lines[-2].startswith(f"{NODE2}: draining sglang") and lines[-1].startswith("    ")

    verbose = io.StringIO()
    ProgressPrinter(verbose, colour=False, width=80, verbose=1).step_finished(NODE1, ok)
    _fits(verbose.getvalue())
    assert verbose.getvalue().count("stopped pid 5306") == 3


def test_history_fits_by_counting_hosts_and_leaving_out_start_and_time() -> None:
    run = _gate_run()
    wide = render_history([run], width=200)
    assert f"{NODE1}=changed" in wide and "2026-12-04T19:25:16.681727Z" in wide
    narrow = render_history([run], width=80)
    _fits(narrow)
    header, row, more = narrow.splitlines()
    assert header.split() == ["RUN", "COMMAND", "PLAYBOOK", "EXIT", "HOSTS"]
    assert row.startswith(run.run_id + "  apply") and row.endswith("  1 rolled back,")
    assert more == " " * row.index("1 rolled") + "1 changed", "wrapped under its column"
    mine = render_history([run], NODE2, width=80).splitlines()
    assert mine[1].startswith(run.run_id) and mine[1].endswith("rolled back")


def test_status_is_a_block_per_host_within_80_columns() -> None:
    from deploy.engine.status import HostRun, HostStatus

    run_id = "20261204T192516.522356Z-f66fa6"
    statuses = [
        HostStatus(NODE1, health="sglang: healthy on 30000",
                   last_run=HostRun(run_id, "changed", "kimi-eagle3", "ops", "2026-12-04")),
        HostStatus(NODE2, lock="stale", lock_holder={"run_id": run_id, "pid": 42},
                   last_run=HostRun(run_id, "unfinished", "kimi-eagle3", "ops", "2026-12-04"),
                   unfinished=[HostRun(run_id, "unfinished", "kimi-eagle3", "ops", "2026-12-04")]),
        HostStatus("gpu-node-03.dc2.example.internal", reachable=False,
                   error="cannot connect to 10.0.0.3:22: connection refused"),
    ]  # fmt: skip
    text = render_status(statuses, width=80)
    _fits(text)
    lines = text.splitlines()
    assert lines[:2] == [
        f"{NODE1}: lock free, sglang: healthy on 30000",
        f"  last run {run_id} (kimi-eagle3): changed",
    ]
    joined = text.replace("\n    ", " ")
    assert f"{NODE2}: lock stale" in lines and "died mid-run" in joined
    assert f"(or `deploy rollback {run_id}`) undoes it first" in joined
    assert "gpu-node-03.dc2.example.internal: UNREACHABLE" in lines


def test_rollback_question_fits_80_columns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = _gate_run()
    run.hosts[0].steps.append(
        StepResult(4, "restart", "Restart SGLang with EAGLE-3 (if the file changed or the "
                   "server runs without it)", "ok")
    )  # fmt: skip
    run.inventory = str((tmp_path / "hosts.yaml").resolve())
    history.save(run)
    target = rollback_target.choose(None, run.inventory, [(NODE1, HostSpec()), (NODE2, HostSpec())])
    question = render_rollback_question(target, width=80)
    _fits(question)
    assert f"  hosts:    {NODE1}, {NODE2}" in question or f"{NODE2}\n" in question
    (files,) = [line for line in question.splitlines() if line.startswith("  files:")]
    assert files.startswith("  files:    /opt/sglang/") and files.endswith("/kimi_k25.py")
    assert "  services: Restart SGLang with EAGLE-3" in question and question.endswith("Proceed?")


def test_the_plan_says_a_refusal_once_at_its_step() -> None:
    """A host's error that only restates its failed step's summary (a preflight's refusal, as
    `deploy.engine.step_fail.fail` or a refused host words it) is said by the step alone; an
    error that says more is kept."""
    why = "gpu-1: sglang: the draft model path /no/such does not exist; nothing was stopped"
    steps = [
        StepResult(4, "restart", "Restart SGLang", "failed", why),
        StepResult(5, "wait_healthy", "Wait until SGLang serves", "not run"),
    ]
    for error in (f"step 5 failed: {why}", why):
        host = HostResult("gpu-1", "not attempted", steps=steps, error=error)
        run = RunResult("r", "apply", "kimi-eagle3", "now", check_mode=True, hosts=[host])
        plan = render_plan(run, width=200)
        assert plan.count("the draft model path /no/such does not exist") == 1, plan
        assert "gpu-1: sglang" not in plan, "the host is named by its heading"
    other = HostResult("gpu-1", "failed", steps=steps, error="gpu-1: cannot connect")
    plan = render_plan(RunResult("r", "apply", "pb", "now", hosts=[other]), width=200)
    assert "  cannot connect" in plan and plan.count("does not exist") == 1, plan
