"""Output a person reads (issue 15 item 4), counted in what real ``deploy`` processes print.

Nothing said twice (a step, a diff, an unreachable host's error), no host name doubled, tables
within the terminal's width (paths shortened in the middle, in full in ``--json``), colour
only when asked for, listings that contact no host, Ansible's short flags, and a rollback
that says what it is doing while the old server loads.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import yaml

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost
from deploy.sandbox.ports import free_port
from tests.integration.conftest import Deploy, KimiHost, Result

pytestmark = pytest.mark.ssh
FILES_ONLY = ("--skip-tags", "service")
TITLE = "Add the EAGLE-3 methods to KimiK25ForConditionalGeneration"
DIFF_LINE = "+    def set_eagle3_layers_to_capture("


def _closed_port() -> int:
    """A port nothing listens on: reserved for this process, so no sandbox server takes it."""
    return free_port()


def _with_dead_host(deploy: Deploy) -> int:
    """Add ``gpu-dead`` (gpu-1's settings, a closed loopback port) to the inventory."""
    data = yaml.safe_load(deploy.inventory.read_text())
    port = _closed_port()
    data["hosts"]["gpu-dead"] = {**data["hosts"]["gpu-1"], "port": port}
    data["groups"]["gpu"].append("gpu-dead")
    deploy.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return port


def _run(deploy: Deploy, *args: str, **env: str) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.cli", *args],
        cwd=deploy.workdir,
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory), **env},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_check_and_apply_say_each_thing_once(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    port = _with_dead_host(deploy)
    where = f"127.0.0.1:{port}"

    plan = _run(deploy, "apply", "kimi-eagle3", "-C", "-D", *FILES_ONLY, COLUMNS="80")
    assert plan.exit_code == 4, plan.output
    out = plan.output
    assert out.count(TITLE) == 1, out  # the plan's step line, no progress line besides
    assert out.count(DIFF_LINE) == 1, out  # the plan's diff, not again under --diff
    assert out.count(where) == 1, out  # the dead host's error, once
    assert "gpu-dead: gpu-dead" not in out and "gpu-dead: not attempted: gpu-dead" not in out
    unwrapped = plan.stdout.replace("\n  ", " ")  # the last line is wrapped at 80 columns
    assert "exit 4 (some host was not attempted; 1 host(s) would change)" in unwrapped
    # A --check run is not recorded (issue 30): its last line names no run id, just the exit.
    assert "\nrun " not in plan.stdout, plan.stdout
    table = plan.stdout[plan.stdout.index("HOST ") : plan.stdout.index("\nexit 4 (")].splitlines()
    assert len(table) == 3 and all(len(line) <= 80 for line in table), table
    assert "  kimi_k25.py  " in table[1] and str(kimi.model_file) not in table[1], "base name"

    full = _run(deploy, "apply", "kimi-eagle3", "--check", "--json", *FILES_ONLY, COLUMNS="80")
    files = json.loads(full.stdout)["hosts"][0]["changed_files"]
    assert files == [str(kimi.model_file)], "--json keeps the path whole"

    run = _run(deploy, "apply", "kimi-eagle3", "--yes", "-f", "2", *FILES_ONLY)
    assert run.exit_code == 4, run.output
    assert run.output.count(TITLE) == 1, run.output  # the live line; the summary has a table
    assert run.output.count(where) == 1, run.output
    assert "gpu-dead: not attempted: cannot connect" in run.stderr
    assert "gpu-dead: gpu-dead" not in run.output


def test_colour_listings_and_short_flags(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    logins = kimi.host.log_text().count("Accepted publickey")

    listed = _run(deploy, "apply", "kimi-eagle3", "--list-hosts", "--list-tasks", "-t", "verify")
    assert listed.exit_code == 0, listed.output
    assert "  hosts (1):\n    gpu-1\n" in listed.stdout
    tasks = listed.stdout.split("  tasks:\n", 1)[1].splitlines()
    assert tasks and all("TAGS: [" in t and "verify" in t for t in tasks), tasks
    assert TITLE not in listed.stdout, "-t verify leaves the edit out"
    assert kimi.host.log_text().count("Accepted publickey") == logins, "no host was contacted"

    always = _run(deploy, "apply", "kimi-eagle3", "-C", *FILES_ONLY, "--color", "always")
    assert always.exit_code == 0 and "\x1b[" in always.stdout, always.output
    never = _run(deploy, "apply", "kimi-eagle3", "-C", *FILES_ONLY, "--color", "never")
    assert never.exit_code == 0 and "\x1b[" not in never.output
    dumb = _run(deploy, "apply", "kimi-eagle3", "-C", *FILES_ONLY, TERM="dumb", NO_COLOR="")
    assert dumb.exit_code == 0 and "\x1b[" not in dumb.output


def test_rollback_reports_progress_while_the_old_server_loads(
    make_gpu_hosts: Callable[..., tuple[list[GpuHost], Deploy]],
) -> None:
    (gpu,), deploy = make_gpu_hosts(["0.5.9"], load_seconds=1.0, warmup_seconds=1.0)
    gpu_host.start_old_server(gpu, timeout=60)  # by hand: how long it loads is not under test
    gpu.configure(load_seconds=11.0)  # every start from here on: the apply's and the rollback's
    applied = deploy("apply", "kimi-eagle3", "--yes")
    assert applied.exit_code == 0, applied.output
    waits = [line for line in applied.stderr.splitlines() if "waiting for sglang" in line]
    assert waits, applied.stderr
    assert not any("/health" in line for line in waits), "deploy's own polls are not news"

    rolled = deploy("rollback", "--yes")

    assert rolled.exit_code == 0, rolled.output
    lines = rolled.stderr.splitlines()
    assert sum("gpu-1: rolling back run " in line for line in lines) == 1, rolled.stderr
    waits = [line for line in lines if line.startswith("gpu-1: waiting for sglang: ")]
    assert len(waits) >= 2, rolled.stderr  # every 5 s of an 11 s load
    assert not any("/health" in line for line in waits), rolled.stderr


NODES = ["gpu-node-01.dc2.example.internal", "gpu-node-02.dc2.example.internal"]
NARROW = {"COLUMNS": "80", "TERM": "dumb"}


def _fits(result: Result, *, except_prefix: tuple[str, ...] = ()) -> list[str]:
    """Every line of the command's output within 80 columns (but those starting with
    ``except_prefix``: diffs, and paths under ``show``); returns the lines."""
    lines = result.output.splitlines()
    long = [line for line in lines if len(line) > 80 and not line.startswith(except_prefix)]
    assert not long, "\n".join(long)
    return lines


def test_eighty_columns_with_real_host_names(
    make_gpu_hosts: Callable[..., tuple[list[GpuHost], Deploy]],
) -> None:
    """Issue 34, point 4: apply (restart, health, gate), show, history, status and rollback on
    an 80-column terminal, hosts named as in a data centre: every line fits, no host name is
    cut, the gate's figures per level stay in the summary, and no ``…`` under TERM=dumb."""
    gpus, deploy = make_gpu_hosts(
        ["0.5.9", "0.5.9"], names=NODES, tokens_per_s=54.1, eagle3_tokens_per_s=96.1
    )
    for gpu in gpus:
        gpu_host.start_old_server(gpu, timeout=60)

    applied = _run(deploy, "apply", "kimi-eagle3", "--yes", **NARROW)

    assert applied.exit_code == 0, applied.output
    lines = _fits(applied)
    output = applied.output
    assert "…" not in output and "..." in applied.stderr, "a long step title, cut for TERM=dumb"
    for node, gpu in zip(NODES, gpus, strict=True):
        assert f"{node}: [1] Save the model file: ok (" in applied.stderr
        row = next(i for i, line in enumerate(lines) if line.startswith(f"{node}  changed  "))
        assert "kimi_k25.py" in lines[row]
        headline = lines[row + 1]
        assert headline.startswith("  gate: c1 ") and " tok/s (x" in headline
        more = itertools.takewhile(lambda line: line.startswith("    "), lines[row + 2 :])
        whole = " ".join([headline, *[line.strip() for line in more]])
        assert ", c32 " in whole, "every level the gate measured"
        assert " ttft " in whole and " accept " in whole, "time to first token, acceptance"
        assert str(gpu.model_file) not in output, "the path is for -v, show and --json"
    assert "tokens_per_s" not in output
    run_id = re.search(r"^run (\S+): exit 0", applied.stdout, re.M)
    assert run_id is not None, applied.stdout
    run = run_id.group(1)

    shown = _run(deploy, "show", run, COLUMNS="80")
    assert shown.exit_code == 0, shown.output
    _fits(shown, except_prefix=("    ", "  changed /"))
    assert f"  changed {gpus[0].model_file}\n" in shown.stdout
    assert "tokens_per_s_c1=" in shown.stdout and "tokens_per_s=" not in shown.stdout

    history = _run(deploy, "history", COLUMNS="80")
    assert history.exit_code == 0, history.output
    rows = _fits(history)
    assert rows[-1].startswith(f"{run}  apply") and rows[-1].endswith("2 changed"), rows

    status = _run(deploy, "status", COLUMNS="80")
    assert status.exit_code == 0, status.output
    rows = _fits(status)
    for node, gpu in zip(NODES, gpus, strict=True):
        assert f"{node}: lock free, sglang: healthy on {gpu.port}" in rows
    assert rows.count(f"  last run {run} (kimi-eagle3): changed") == 2

    rolled = _run(deploy, "rollback", "--yes", **NARROW)
    assert rolled.exit_code == 0, rolled.output
    rows = _fits(rolled)
    assert all(any(row.startswith(f"{node}  restored  ") for row in rows) for node in NODES)
    assert "…" not in rolled.output
