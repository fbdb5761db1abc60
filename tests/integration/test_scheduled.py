"""Unattended runs (issue 4): the workstation lock, --report/--log-file, the webhook, schedules.

The webhook is received by a real HTTP server on loopback started by the test; the schedule
is checked with ``systemd-analyze verify`` where systemd is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import jsonschema
import pytest

from deploy.report.json_schema import HISTORY_SCHEMA, SCHEMA
from tests.integration.conftest import Deploy
from tests.integration.test_become import ORIGINAL, PASSWORD, Fleet, clean, fleet  # noqa: F401
from tests.integration.test_fleet import report, write_playbook


def test_overlapping_runs_of_one_job(make_kimi_hosts, tmp_path: Path, isolated_env: Path) -> None:  # type: ignore[no-untyped-def]
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    go = tmp_path / "go"  # the first run holds on until the test creates this
    playbook = write_playbook(
        tmp_path, "nightly", check=f"while [ ! -e {go} ]; do sleep 0.05; done"
    )
    locks = isolated_env / ".local/state/deploy/locks"
    first = deploy.popen("apply", str(playbook), "--yes", "--json")
    host_lock = kimi.host.state_dir / "lock"
    deadline = time.monotonic() + 20
    while not (host_lock.exists() and "run_id" in host_lock.read_text()):
        assert time.monotonic() < deadline and first.poll() is None, "the first run never began"
        time.sleep(0.02)
    logins = kimi.host.log_text().count("Accepted publickey")

    began = time.monotonic()
    second = deploy("apply", str(playbook), "--yes", "--json")
    took = time.monotonic() - began

    assert second.exit_code == 4, second.output
    assert second.stdout == "", "no report: nothing ran"
    assert "another run of nightly.yaml" in second.stderr and "--wait-lock" in second.stderr
    holder = json.loads(next(locks.glob("*.lock")).read_text())
    assert holder["run_id"] in second.stderr and str(holder["pid"]) in second.stderr
    assert first.poll() is None, f"refused while the first still runs (took {took:.1f} s)"
    assert kimi.host.log_text().count("Accepted publickey") == logins, "no host was contacted"

    waiting = deploy.popen("apply", str(playbook), "--yes", "--json", "--wait-lock", "60")
    time.sleep(0.5)
    assert waiting.poll() is None, "waits for the lock"
    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    waited, waited_err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, waited + waited_err
    assert report(out)["hosts"][0]["outcome"] == "changed"
    assert report(waited)["hosts"][0]["outcome"] == "unchanged", "ran after the first"


def test_report_file_log_file_and_history_json(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, deploy = make_kimi_hosts(["0.5.9"])
    playbook = write_playbook(tmp_path, "nightly")
    report_file = tmp_path / "out/last.json"
    log_file = tmp_path / "out/deploy.log"
    args = ("--yes", "--json", "--report", str(report_file), "--log-file", str(log_file))

    result = deploy("apply", str(playbook), *args)

    assert result.exit_code == 0, result.output
    document = report(result.stdout)
    assert json.loads(report_file.read_text()) == document
    run_id = document["run_id"]
    log = log_file.read_text().splitlines()
    assert all(f" {run_id} " in line for line in log)
    assert "start: deploy apply" in log[0] and log[-1].endswith(f"{run_id} exit 0")
    assert any("gpu-1: [1] Add get_embed_and_head: changed" in line for line in log)
    assert any("HOST" in line and "OUTCOME" in line for line in log), "the summary table"

    again = deploy("apply", str(playbook), *args)
    assert again.exit_code == 0, again.output
    assert len(log_file.read_text().splitlines()) > len(log), "appended, not replaced"
    history = deploy("history", "--json")
    assert history.exit_code == 0, history.output
    jsonschema.validate(json.loads(history.stdout), HISTORY_SCHEMA)
    assert [r["run_id"] for r in json.loads(history.stdout)] == [
        run_id,
        report(again.stdout)["run_id"],
    ]


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []  # type: ignore[type-arg]  # noqa: RUF012

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(
            {"content_type": self.headers["Content-Type"], "body": json.loads(body)}
        )
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:  # type: ignore[type-arg]
    received: list[dict] = []  # type: ignore[type-arg]
    handler = type("Hook", (_Hook,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()
    server.server_close()


def test_webhook_on_failure_only(make_kimi_hosts, tmp_path: Path, webhook) -> None:  # type: ignore[no-untyped-def]
    url, received = webhook
    _, deploy = make_kimi_hosts(["0.5.9", None])
    playbook = write_playbook(tmp_path, "nightly")

    ok = deploy("apply", str(playbook), "--yes", "-l", "gpu-1", "--notify-url", url)
    assert ok.exit_code == 0 and received == [], "exit 0 notifies no one"

    failed = deploy("apply", str(playbook), "--yes", "--json", "--notify-url", url)
    assert failed.exit_code == 1, failed.output
    (hook,) = received
    assert hook["content_type"] == "application/json"
    body = hook["body"]
    assert body["exit_code"] == 1 and body["run_id"] == json.loads(failed.stdout)["run_id"]
    assert body["text"].startswith("deploy apply ")
    assert "gpu-2" in body["text"] and "does not exist" in body["text"]
    jsonschema.validate(body["report"], SCHEMA)

    bad = deploy("apply", str(tmp_path / "missing.yaml"), "--yes", "--notify-url", url)
    assert bad.exit_code == 2 and len(received) == 2
    assert received[1]["body"]["report"] is None and "not found" in received[1]["body"]["text"]

    # A webhook that cannot be reached is a warning; the exit code stays the run's.
    nowhere = "http://127.0.0.1:9/hook"
    unheard = deploy("apply", str(playbook), "--yes", "--json", "--notify-url", nowhere)
    assert unheard.exit_code == 1, unheard.output
    assert "could not notify" in unheard.stderr and "cannot reach" in unheard.stderr
    report(unheard.stdout)


def _job(tmp_path: Path) -> Deploy:
    """A workstation with an inventory and a playbook (no host is contacted by `schedule`)."""
    workdir = tmp_path / "ops"
    (workdir / "playbooks").mkdir(parents=True)
    write_playbook(workdir / "playbooks", "kimi-nightly")
    inventory = workdir / "hosts.yaml"
    inventory.write_text(
        "hosts:\n  gpu-1: {address: 127.0.0.1, port: 2222, vars: {model_file: /x.py, root: /}}\n"
    )
    return Deploy(workdir, inventory)


def test_schedule_prints_units_and_cron(tmp_path: Path, isolated_env: Path) -> None:
    deploy = _job(tmp_path)
    when = "Mon *-*-* 03:00"

    units = deploy("schedule", "kimi-nightly", "--on-calendar", when, "-l", "gpu-*")

    assert units.exit_code == 0, units.output
    text = units.stdout
    assert "# deploy-kimi-nightly.service\n" in text and "# deploy-kimi-nightly.timer\n" in text
    assert f"OnCalendar={when}\n" in text and "Persistent=false" in text
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    playbook = deploy.workdir / "playbooks/kimi-nightly.yaml"
    assert f" apply {playbook} -i {deploy.inventory} -l gpu-* --yes --json --report " in exec_line
    state = isolated_env / ".local/state/deploy"
    assert f"--report {state}/reports/deploy-kimi-nightly.json" in exec_line
    assert f"--log-file {state}/logs/deploy-kimi-nightly.log --timeout 14400" in exec_line
    assert "TimeoutStartSec=14700" in text and f"WorkingDirectory={deploy.workdir}" in text

    cron = deploy("schedule", "kimi-nightly", "--on-calendar", when, "--cron")
    assert cron.exit_code == 0, cron.output
    comment, line = cron.stdout.splitlines()
    assert comment.startswith("# deploy-kimi-nightly")
    assert line.startswith(f"0 3 * * 1 cd {deploy.workdir} && ")
    assert "apply" in line and "--yes --json" in line and line.endswith(">/dev/null")

    bad = deploy("schedule", "kimi-nightly", "--on-calendar", "Mon *-*-* 25:00")
    assert bad.exit_code == 2 and "--on-calendar" in bad.stderr, bad.output
    no_cron = deploy("schedule", "kimi-nightly", "--on-calendar", "*-*-* 03:00:30", "--cron")
    assert no_cron.exit_code == 2 and "no crontab equivalent" in no_cron.stderr


def test_schedule_keeps_secrets_off_the_command_line(tmp_path: Path, isolated_env: Path) -> None:
    """A secret in a job's -e would sit in the unit file and in every run's argv (ps): refused,
    and a vars file holding one must be readable by its owner only; its path is scheduled."""
    deploy = _job(tmp_path)
    unit_dir = isolated_env / ".config/systemd/user"
    token = "hf_" + "q" * 30

    inline = deploy(
        "schedule", "kimi-nightly", "--on-calendar", "daily", "--install",
        "-e", f"hf_token={token}",
    )  # fmt: skip
    assert inline.exit_code == 2, inline.output
    assert inline.stderr.count("\n") == 1 and "-e hf_token=...: " in inline.stderr
    assert "pass -e @FILE" in inline.stderr and token not in inline.output
    assert not unit_dir.exists()

    vars_file = tmp_path / "secrets.yaml"
    vars_file.write_text(f"hf_token: {token}\n")
    vars_file.chmod(0o644)
    shared = deploy("schedule", "kimi-nightly", "--on-calendar", "daily", "-e", f"@{vars_file}")
    assert shared.exit_code == 2, shared.output
    assert f"{vars_file} holds hf_token but its mode is 0644" in shared.stderr
    assert token not in shared.output

    vars_file.chmod(0o600)
    private = deploy(
        "schedule", "kimi-nightly", "--on-calendar", "daily", "--install", "-e", f"@{vars_file}"
    )
    assert private.exit_code == 0, private.output
    service = (unit_dir / "deploy-kimi-nightly.service").read_text()
    assert f"-e @{vars_file}" in service and token not in service

    harmless = deploy("schedule", "kimi-nightly", "--on-calendar", "daily", "-e", "tp=8")
    assert harmless.exit_code == 0 and " -e tp=8 " in harmless.stdout, harmless.output


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (apt-get install systemd); unit contents are "
    "checked by test_schedule_prints_units_and_cron",
)
def test_installed_units_pass_systemd_analyze_verify(tmp_path: Path, isolated_env: Path) -> None:
    deploy = _job(tmp_path)
    notify = "https://hooks.example.invalid/T0/B0/x%y$z"
    installed = deploy(
        "schedule", "kimi-nightly", "--on-calendar", "Mon..Fri *-*-* 03:00", "--install",
        "-e", "note=two words", "--notify-url", notify,
    )  # fmt: skip
    assert installed.exit_code == 0, installed.output
    unit_dir = isolated_env / ".config/systemd/user"
    service, timer = (
        unit_dir / "deploy-kimi-nightly.service",
        unit_dir / "deploy-kimi-nightly.timer",
    )
    assert (
        f"wrote {service}" in installed.stdout
        and "systemctl --user enable --now" in installed.stdout
    )
    assert '"note=two words"' in service.read_text() and "x%%y$$z" in service.read_text()

    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "verify", "--user", str(service), str(timer)],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr
    assert f"{service.name}:" not in verify.stderr and f"{timer.name}:" not in verify.stderr, (
        verify.stderr
    )
    # systemd runs this very installation, by absolute path.
    lines = service.read_text().splitlines()
    program = next(x for x in lines if x.startswith("ExecStart=")).split("=", 1)[1].split()[0]
    assert program in (sys.executable, str(Path(sys.executable).parent / "deploy"))


def test_a_job_whose_hosts_need_a_become_password_works_the_next_night(
    clean: Fleet,  # noqa: F811
    tmp_path: Path,
    isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34, point 5: cron and systemd start the job without the operator's shell
    environment, so ``become_password_env`` would be unset every night. `deploy schedule`
    refuses until an owner-only environment file sets it, then writes the job to read it; the
    cron line, run with an empty environment as cron runs it, then changes the host as root."""
    monkeypatch.setenv("SUDO_SECRET", PASSWORD)  # set in the shell: the job still lacks it
    deploy = clean.deploy(tmp_path, "pw", become=True, become_password_env="SUDO_SECRET")
    env_file = isolated_env / ".config/deploy/env/deploy-conf.env"
    schedule = ("schedule", "conf.yaml", "--on-calendar", "daily")

    lacking = deploy(*schedule, "--cron")
    assert lacking.exit_code == 2 and lacking.stdout == "", lacking.output
    assert lacking.stderr.count("\n") == 1, lacking.stderr
    assert "the job would lack SUDO_SECRET (become_password_env of gpu-1)" in lacking.stderr
    assert f"into {env_file} (chmod 600)" in lacking.stderr

    env_file.parent.mkdir(parents=True)
    env_file.write_text(f"# the nightly conf job\nSUDO_SECRET='{PASSWORD}'\n")
    env_file.chmod(0o644)
    shared = deploy(*schedule, "--cron")
    assert shared.exit_code == 2, shared.output
    assert f"{env_file} is mode 0644: other users can read" in shared.stderr
    assert PASSWORD not in shared.output

    env_file.chmod(0o600)
    cron = deploy(*schedule, "--cron")
    assert cron.exit_code == 0, cron.output
    assert PASSWORD not in cron.output
    assert "#  SUDO_SECRET (become_password_env of gpu-1)" in cron.stdout
    line = cron.stdout.splitlines()[-1]
    body = line.split(" ", 5)[5].replace("\\%", "%")
    assert f"set -a && . {env_file} && set +a && " in body

    # As cron runs it: /bin/sh, an environment of HOME, PATH, SHELL and LOGNAME only.
    bare = {
        "HOME": str(isolated_env),
        "PATH": "/usr/bin:/bin",
        "SHELL": "/bin/sh",
        "LOGNAME": "root",
    }
    without = subprocess.run(
        ["/bin/sh", "-c", body.replace(f"set -a && . {env_file} && set +a && ", "")],
        env=bare, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert without.returncode != 0 and clean.untouched(), "the job the issue saw fail nightly"
    report_file = isolated_env / ".local/state/deploy/reports/deploy-conf.json"
    (lost,) = json.loads(report_file.read_text())["hosts"]
    assert lost["error"] == "gpu-1: become_password_env names $SUDO_SECRET, which is not set"
    night = subprocess.run(
        ["/bin/sh", "-c", body], env=bare, capture_output=True, text=True, timeout=120, check=False
    )
    assert night.returncode == 0, night.stderr
    assert clean.target.read_bytes() == ORIGINAL + b"feature=on\n"
    assert json.loads(report_file.read_text())["exit_code"] == 0
    log_file = isolated_env / ".local/state/deploy/logs/deploy-conf.log"
    assert PASSWORD not in night.stderr + report_file.read_text() + log_file.read_text()

    installed = deploy(*schedule, "--install")
    assert installed.exit_code == 0, installed.output
    service = (isolated_env / ".config/systemd/user/deploy-conf.service").read_text()
    assert f"EnvironmentFile={env_file}\n" in service and PASSWORD not in service
    if shutil.which("systemd-analyze"):
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        verify = subprocess.run(
            ["systemd-analyze", "verify", "--user",
             str(isolated_env / ".config/systemd/user/deploy-conf.service")],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        )  # fmt: skip
        assert verify.returncode == 0 and "deploy-conf.service:" not in verify.stderr, verify.stderr
