"""`deploy schedule`'s unit files and crontab lines, and the lock per job, offline (issue 4)."""

from __future__ import annotations

import os
import shlex
import threading
import time
from pathlib import Path

import pytest

from deploy import jobenv, schedule
from deploy.config.inventory import HostSpec
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


# --- issue 34, point 5: a job's *_env secrets come from an owner-only environment file ------


def _hosts(**settings: object) -> list[tuple[str, HostSpec]]:
    return [
        ("gpu-node-01.dc2.example.internal", HostSpec(address="10.0.0.1", **settings)),  # type: ignore[arg-type]
        ("gpu-node-02.dc2.example.internal", HostSpec(address="10.0.0.2", **settings)),  # type: ignore[arg-type]
    ]


def test_every_star_env_setting_is_a_variable_the_job_needs() -> None:
    needed = jobenv.required_env(_hosts(password_env="SSH_PW", become_password_env="SUDO_PW"))
    assert [n.name for n in needed] == ["SSH_PW", "SUDO_PW"]
    assert needed[1].describe() == (
        "SUDO_PW (become_password_env of gpu-node-01.dc2.example.internal, "
        "gpu-node-02.dc2.example.internal)"
    )
    assert jobenv.required_env(_hosts()) == []


def _env_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "job.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_an_owner_only_file_setting_every_variable_passes(tmp_path: Path) -> None:
    needed = jobenv.required_env(_hosts(become_password_env="SUDO_PW"))
    path = _env_file(tmp_path, "# for the nightly job\n\nSUDO_PW='p@ss word!'\nOTHER=x\n")
    assert jobenv.check_env_file(path, needed, given=True)["SUDO_PW"] == "p@ss word!"


def test_a_missing_default_file_says_what_the_job_would_lack(tmp_path: Path) -> None:
    needed = jobenv.required_env(_hosts(become_password_env="SUDO_PW"))
    with pytest.raises(InputError) as refused:
        jobenv.check_env_file(tmp_path / "absent.env", needed, given=False)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("the job would lack SUDO_PW (become_password_env of gpu-node-01")
    assert f"write SUDO_PW='...' into {tmp_path / 'absent.env'} (chmod 600)" in message


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        ("SUDO_PW='s3cret'\n", 0o644, r"is mode 0644: other users can read .* `chmod 600 "),
        ("SUDO_PW='s3cret'\n", 0o640, r"is mode 0640"),
        ("OTHER=1\n", 0o600, r"the job would lack SUDO_PW .*: .* does not set it"),
        ("SUDO_PW=\n", 0o600, r"the job would lack SUDO_PW"),
        ("SUDO_PW=s3cret word\n", 0o600, r"job.env:1: the value of SUDO_PW must be single-quoted"),
        ("export SUDO_PW=s3cret\n", 0o600, r"job.env:1: not a NAME=value line"),
    ],
)
def test_unsafe_or_incomplete_files_are_refused_without_showing_values(
    tmp_path: Path, text: str, mode: int, expected: str
) -> None:
    needed = jobenv.required_env(_hosts(become_password_env="SUDO_PW"))
    with pytest.raises(InputError, match=expected) as refused:
        jobenv.check_env_file(_env_file(tmp_path, text, mode), needed, given=True)
    assert "s3cret" not in str(refused.value) and "\n" not in str(refused.value)


def test_a_symlink_another_owner_or_a_shared_directory_is_refused(tmp_path: Path) -> None:
    needed = jobenv.required_env(_hosts(become_password_env="SUDO_PW"))
    real = _env_file(tmp_path, "SUDO_PW=x\n")
    link = tmp_path / "link.env"
    link.symlink_to(real)
    with pytest.raises(InputError, match="is a symbolic link"):
        jobenv.check_env_file(link, needed, given=True)
    if os.geteuid() == 0:
        os.chown(real, 12345, 12345)
        with pytest.raises(InputError, match=r"belongs to uid 12345, not to you"):
            jobenv.check_env_file(real, needed, given=True)
        os.chown(real, 0, 0)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InputError, match="may be written by other users"):
        jobenv.check_env_file(_env_file(shared, "SUDO_PW=x\n"), needed, given=True)


def test_the_unit_and_the_cron_line_read_the_file_and_document_it() -> None:
    job = _job(env_file=Path("/home/ops/.config/deploy/env/deploy-kimi.env"),
               env_needs=("SUDO_PW (become_password_env of gpu-node-01)",))  # fmt: skip
    service = schedule.render_service(job)
    assert "EnvironmentFile=/home/ops/.config/deploy/env/deploy-kimi.env\n" in service
    assert "#  SUDO_PW (become_password_env of gpu-node-01)\n" in service
    assert service.index("EnvironmentFile=") < service.index("ExecStart=")
    lines = schedule.cron_line(job).splitlines()
    assert "#  SUDO_PW (become_password_env of gpu-node-01)" in lines
    assert lines[-1].startswith(
        "0 3 * * 1 cd /ops && set -a && . /home/ops/.config/deploy/env/deploy-kimi.env "
        "&& set +a && "
    )
    plain = schedule.render_service(_job())
    assert "EnvironmentFile" not in plain and "set -a" not in schedule.cron_line(_job())
