"""The sglang-flags playbook over real sshd with the stand-in (issue 34, point 2).

Flags given with ``-e`` change a server started by hand: the new server is the operator's
own (its ``--host``, other flags, environment) with only those flags set or removed, checked
healthy, answering and not slower; a re-run is no change; a bad flag value rolls back to the
old command line; ``--port`` is refused before any host is touched. What runs is read from
the kernel (/proc), not from deploy's report.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.sandbox.gpu_host import listener_cmdline, listener_pid
from tests.integration.test_service_restart import OPERATOR_ARGS, listen_addresses, serve_by_hand

pytestmark = pytest.mark.ssh

SET = "set_flags=--mem-fraction-static 0.9 --enable-metrics"
REMOVE = "remove_flags=--max-running-requests"


def steps(stdout: str) -> dict[str, dict[str, Any]]:
    host = json.loads(stdout)["hosts"][0]
    return {s["kind"]: s for s in host["steps"]}


def test_flags_change_rerun_and_rollback(make_gpu_hosts: Any) -> None:
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    old_pid = serve_by_hand(gpu, extra_args=[*OPERATOR_ARGS, "--max-running-requests", "64"])
    old = listener_cmdline(gpu.port)
    assert old is not None

    check = deploy("apply", "sglang-flags", "-e", SET, "-e", REMOVE, "--check")
    assert check.exit_code == 0, check.output
    assert "+  --enable-metrics" in check.stdout and "-  --max-running-requests 64" in check.stdout
    assert listener_pid(gpu.port) == old_pid, "--check touches nothing"

    applied = deploy("apply", "sglang-flags", "-e", SET, "-e", REMOVE, "--yes", "--json")
    assert applied.exit_code == 0, applied.output
    done = steps(applied.stdout)
    assert done["restart"]["status"] == "ok" and done["gate_throughput"]["status"] == "ok"
    assert done["smoke"]["status"] == "ok"
    new = listener_cmdline(gpu.port)
    assert new is not None and listener_pid(gpu.port) != old_pid
    expected = [w for w in old if w not in ("--max-running-requests", "64")]
    expected[expected.index("--mem-fraction-static") + 1] = "0.9"
    assert new == [*expected, "--enable-metrics"]
    assert listen_addresses(gpu.port) == {"0.0.0.0"}, "the operator's --host is kept"

    again = deploy("apply", "sglang-flags", "-e", SET, "-e", REMOVE, "--check",
                   "--detailed-exitcode")  # fmt: skip
    assert again.exit_code == 0, again.output
    quiet = deploy("apply", "sglang-flags", "-e", SET, "-e", REMOVE, "--yes", "--json")
    assert quiet.exit_code == 0 and steps(quiet.stdout)["restart"]["status"] == "unchanged"
    assert listener_cmdline(gpu.port) == new

    undone = deploy("rollback", "--yes")
    assert undone.exit_code == 0, undone.output
    assert listener_cmdline(gpu.port) == old, "the old server, with its old command line"


def test_a_bad_flag_value_is_refused_before_the_stop(make_gpu_hosts: Any) -> None:
    """0.5.9's argparse refuses the value: the new command line is parsed by the server's own
    argparse before the stop (issue 30), so the operator's server is never stopped for it."""
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    old_pid = serve_by_hand(gpu, extra_args=OPERATOR_ARGS)
    old = listener_cmdline(gpu.port)
    failed = deploy("apply", "sglang-flags", "-e", "set_flags=--mem-fraction-static lots",
                    "--yes", "--json")  # fmt: skip
    assert failed.exit_code == 4, failed.output
    host = json.loads(failed.stdout)["hosts"][0]
    assert host["outcome"] == "not attempted", host
    assert "mem-fraction-static" in host["error"] and "nothing was stopped" in host["error"]
    assert listener_pid(gpu.port) == old_pid, "the same process: never stopped"
    assert listener_cmdline(gpu.port) == old


@pytest.mark.parametrize(
    "flags", ["set_flags=--port 31000", "remove_flags=--host", "set_flags=--po 1"]
)
def test_moving_flags_are_refused_before_any_host(make_gpu_hosts: Any, flags: str) -> None:
    (gpu,), deploy = make_gpu_hosts(["0.5.9"])
    old_pid = serve_by_hand(gpu, extra_args=OPERATOR_ARGS)
    refused = deploy("apply", "sglang-flags", "-e", flags, "--yes")
    assert refused.exit_code == 2, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert "sglang-flags.yaml:" in line and "steps[0].restart.args" in line, line
    assert "moves the server" in line and "allow_move: true" in line
    assert listener_pid(gpu.port) == old_pid
    assert not (gpu.ssh.state_dir / "runs").exists()
