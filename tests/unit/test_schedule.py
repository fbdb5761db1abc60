"""`deploy schedule`'s unit files and crontab lines, and the lock per job, offline (issue 4)."""

from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path

import pytest

from deploy import schedule
from deploy.engine import local_lock
from deploy.errors import InputError


def _job(**changes: object) -> schedule.Job:
    fields: dict[str, object] = {
        "name": "deploy-kimi",
        "playbook": Path("/ops/playbooks/kimi.yaml"),
        "inventory": Path("/ops/hosts.yaml"),
        "on_calendar": "Mon *-*-* 03:00",
        "workdir": Path("/ops"),
        "report": Path("/state/reports/deploy-kimi.json"),
        "log_file": Path("/state/logs/deploy-kimi.log"),
        "timeout": 3600.0,
    }
    fields.update(changes)
    return schedule.Job(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("calendar", "cron"),
    [
        ("Mon *-*-* 03:00", "0 3 * * 1"),
        ("daily", "0 0 * * *"),
        ("weekly", "0 0 * * 1"),
        ("Mon..Fri *-*-* 08..18:0/30", "*/30 8-18 * * 1-5"),
        ("Sat,Sun 12:00", "0 12 * * 6,7"),
        ("*-*-01 04:30:00", "30 4 1 * *"),
        ("*-06-15 5/20:00", "0 5-23/20 15 6 *"),
        ("*:0/15", "*/15 * * * *"),
        ("Fri", "0 0 * * 5"),
    ],
)
def test_cron_schedule(calendar: str, cron: str) -> None:
    assert schedule.cron_schedule(calendar) == cron


@pytest.mark.parametrize(
    "calendar",
    ["Mon *-*-* 03:00:30", "2026-01-01 00:00", "03:00 Europe/Paris", "Mon *-*-* 25:00", "Someday"],
)
def test_calendars_cron_cannot_express_are_refused(calendar: str) -> None:
    with pytest.raises(InputError, match="no crontab equivalent"):
        schedule.cron_schedule(calendar)


def test_the_command_is_non_interactive_and_absolute() -> None:
    argv = schedule.apply_argv(_job(limit=("gpu-*",), extra_vars=("a=b",), notify_url="http://x"))
    assert Path(argv[0]).is_absolute()
    tail = argv[argv.index("apply") :]
    assert tail == [
        "apply", "/ops/playbooks/kimi.yaml", "-i", "/ops/hosts.yaml", "-l", "gpu-*", "-e", "a=b",
        "--yes", "--json", "--report", "/state/reports/deploy-kimi.json",
        "--log-file", "/state/logs/deploy-kimi.log", "--timeout", "3600", "--notify-url", "http://x",
    ]  # fmt: skip


def test_service_quotes_for_systemd() -> None:
    text = schedule.render_service(
        _job(extra_vars=('msg=say "hi" \\o/', "cost=100%", "home=$HOME"))
    )
    (line,) = [l for l in text.splitlines() if l.startswith("ExecStart=")]  # noqa: E741
    assert '"msg=say \\"hi\\" \\\\o/"' in line
    assert " cost=100%% " in line and ' "home=$$HOME" ' in line
    assert "TimeoutStartSec=3900" in text and "Type=oneshot" in text
    with pytest.raises(InputError, match="newline"):
        schedule.render_service(_job(extra_vars=("a=1\nb",)))


def test_timer_is_not_persistent() -> None:
    text = schedule.render_timer(_job())
    assert "OnCalendar=Mon *-*-* 03:00\n" in text
    assert "Persistent=false" in text and "Unit=deploy-kimi.service" in text
    assert "WantedBy=timers.target" in text


def test_cron_line_quotes_for_the_shell_and_escapes_percent() -> None:
    comment, line = schedule.cron_line(_job(extra_vars=("note=50% done",))).splitlines()
    assert comment.startswith("# deploy-kimi:")
    assert line.startswith("0 3 * * 1 cd /ops && ")
    assert "'note=50\\% done'" in line, "cron would turn a bare % into a newline"
    command = line.split(" && ", 1)[1].removesuffix(" >/dev/null").replace("\\%", "%")
    words = shlex.split(command)
    assert words[words.index("-e") + 1] == "note=50% done"


@pytest.mark.parametrize(
    ("playbook", "unit"),
    [
        ("kimi-eagle3", "deploy-kimi-eagle3"),
        ("Kimi eagle/3", "deploy-Kimi-eagle-3"),
        ("..", "deploy-playbook"),
    ],
)
def test_unit_names(playbook: str, unit: str) -> None:
    assert schedule.unit_name(playbook) == unit


def test_install_writes_both_units(tmp_path: Path) -> None:
    job = _job()
    written = schedule.install(job, schedule.user_unit_dir(tmp_path / "config"))
    assert [p.name for p in written] == ["deploy-kimi.service", "deploy-kimi.timer"]
    assert written[0].parent == tmp_path / "config/systemd/user"
    assert "enable --now deploy-kimi.timer" in schedule.enable_hint(job)


def test_workstation_lock_refuses_a_second_run_of_the_same_job(tmp_path: Path) -> None:
    playbook, inventory, other = (
        tmp_path / "kimi.yaml",
        tmp_path / "hosts.yaml",
        tmp_path / "b.yaml",
    )
    first = local_lock.acquire(playbook, inventory, {"run_id": "run-1", "pid": 42, "user": "ops"})
    with pytest.raises(local_lock.RunLocked, match=r"run run-1 by ops \(pid 42\)") as refused:
        local_lock.acquire(playbook, inventory, {"run_id": "run-2"})
    assert refused.value.exit_code == 4 and "--wait-lock" in str(refused.value)
    local_lock.acquire(playbook, other, {"run_id": "run-3"}).release()  # another job: free

    threading.Timer(0.2, first.release).start()
    began = time.monotonic()
    with local_lock.acquire(playbook, inventory, {"run_id": "run-4"}, wait=10) as second:
        assert 0.1 < time.monotonic() - began < 5
        assert '"run-4"' in second.path.read_text()
    assert local_lock.lock_path(playbook, inventory).parent.name == "locks"


@pytest.mark.parametrize(
    "item", ["hf_token=abc", "API_KEY=x", "db_password=p", "my_secret=s", "listed=v"]
)
def test_secret_values_are_refused_on_a_scheduled_command_line(item: str) -> None:
    with pytest.raises(InputError, match=r"readable by every user .* pass -e @FILE"):
        schedule.check_secrets([item], listed=["listed"])


def test_plain_values_and_empty_secrets_pass() -> None:
    schedule.check_secrets(["tp=8", "model_path=/models/x", "hf_token=", "keyboard_layout=us"])


def test_a_secret_vars_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("hf_token: abc\ntp: 8\n")
    path.chmod(0o640)
    with pytest.raises(InputError, match=r"holds hf_token but its mode is 0640"):
        schedule.check_secrets([f"@{path}"])
    path.chmod(0o600)
    schedule.check_secrets([f"@{path}"])
    path.write_text("tp: 8\n")
    path.chmod(0o644)
    schedule.check_secrets([f"@{path}"])  # nothing secret in it: its mode does not matter
