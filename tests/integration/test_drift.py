"""Drift detection (issue 15 item 3): ``--check --detailed-exitcode`` and a scheduled drift check.

A real sshd host is patched, a scheduled drift-check job (the crontab line ``deploy schedule
--check`` prints, run by bash as cron would) finds nothing to report, a hand edit reverts the
patch, and the same job then exits 5, writes its report and tells a real webhook receiver on
127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from deploy.report.json_schema import SCHEMA
from deploy.sandbox.wheels import kimi_k25_source
from tests.integration.conftest import Deploy, KimiHost
from tests.integration.test_fleet import write_playbook
from tests.integration.test_scheduled import webhook

pytestmark = pytest.mark.ssh
__all__ = ["webhook"]  # the fixture, imported to be used here


def _cron_command(line: str) -> str:
    """The shell command of a crontab line (five time fields, then the command)."""
    return line.split(" ", 5)[5].replace("\\%", "%")


def test_scheduled_drift_check_notifies_after_a_hand_edit(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
    tmp_path: Path,
    webhook: tuple[str, list[dict]],  # type: ignore[type-arg]
) -> None:
    url, received = webhook
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    playbook = write_playbook(tmp_path, "nightly")
    assert deploy("apply", str(playbook), "--yes").exit_code == 0
    patched = kimi.model_file.read_bytes()

    report_file = tmp_path / "drift.json"
    job = deploy(
        "schedule", str(playbook), "--check", "--on-calendar", "daily", "--cron",
        "--notify-url", url, "--report", str(report_file),
    )  # fmt: skip
    assert job.exit_code == 0, job.output
    comment, line = job.stdout.splitlines()
    assert comment.startswith("# deploy-check-nightly: deploy apply nightly.yaml --check")
    assert " --check --detailed-exitcode --json " in line and "--yes" not in line

    def run_job() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", _cron_command(line)], capture_output=True, text=True, timeout=120
        )

    quiet = run_job()
    assert quiet.returncode == 0, quiet.stderr
    assert received == [], "no drift, no message"
    assert json.loads(report_file.read_text())["exit_code"] == 0

    kimi.model_file.write_bytes(kimi_k25_source("0.5.9"))  # someone undid the patch by hand
    drifted = run_job()

    assert drifted.returncode == 5, drifted.stderr
    assert kimi.model_file.read_bytes() != patched, "a check changes nothing"
    document = json.loads(report_file.read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["exit_code"] == 5 and document["detailed_exitcode"] is True
    assert [h["outcome"] for h in document["hosts"]] == ["would change"]
    (hook,) = received
    body = hook["body"]
    assert body["exit_code"] == 5 and body["run_id"] == document["run_id"]
    assert "drift" in body["text"] and "would change: gpu-1." in body["text"], body["text"]

    # By hand, the same: the summary counts the hosts that would change.
    by_hand = deploy("apply", str(playbook), "-C", "--detailed-exitcode")
    assert by_hand.exit_code == 5, by_hand.output
    assert "exit 5 (1 host(s) would change; nothing was changed)" in by_hand.stdout
    plain = deploy("apply", str(playbook), "--check")
    assert plain.exit_code == 0 and "1 host(s) would change" in plain.stdout, plain.output
    refused = deploy("apply", str(playbook), "--yes", "--detailed-exitcode")
    assert refused.exit_code == 2 and "--detailed-exitcode needs --check" in refused.stderr
