"""Output a person reads (issue 15 item 4), counted in what real ``deploy`` processes print.

Nothing said twice (a step, a diff, an unreachable host's error), no host name doubled, tables
within the terminal's width (paths shortened in the middle, in full in ``--json``), colour
only when asked for, listings that contact no host, Ansible's short flags, and a rollback
that says what it is doing while the old server loads.
"""

from __future__ import annotations

import json
import os
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
    assert "exit 4 (some host was not attempted; 1 host(s) would change)" in plan.stdout
    table = plan.stdout[plan.stdout.index("HOST ") :].splitlines()[:-1]  # less "run …: exit"
    assert len(table) == 3 and all(len(line) <= 80 for line in table), table
    assert "…" in table[1] and "kimi_k25.py " in table[1], "shortened in the middle"

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
