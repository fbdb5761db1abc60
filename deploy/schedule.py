"""``deploy schedule``: a systemd user timer + service (or a crontab line) for a playbook.

A scheduled run must be the same command an operator would type, made non-interactive and
self-contained: absolute paths (a timer's working directory and PATH are not the shell's),
``--yes --json`` (never prompt; stdout is one JSON document), ``--report`` (the last report
at a fixed path for monitoring), ``--log-file`` (a plain log that accumulates), an overall
``--timeout`` (never hang; systemd's own limit sits a little above it as a backstop) and
optionally ``--notify-url``. Overlap with a still-running previous run is handled by the
command itself (the workstation lock, `deploy.engine.local_lock`), so the schedule needs no
guard of its own.

A drift check (``deploy schedule --check``) runs ``deploy apply --check --detailed-exitcode``
instead: it changes nothing, exits 5 when a host is no longer in the desired state (a
``pip install -U sglang`` or a hand edit undid the patch) and so notifies the webhook, and its
systemd service shows as failed until the drift is fixed.

A secret never goes into the schedule: a ``-e`` value lands in the unit file or crontab and,
each time the job runs, in the process's command line, which every user of the workstation can
read (``ps``, ``/proc/PID/cmdline``). `check_secrets` refuses a secret-looking ``-e NAME=VALUE``
(a name `deploy.masking` treats as secret, or one listed in ``secret_vars``) and a ``-e @FILE``
that defines one while group or others can read the file: the way to schedule a secret is a
vars file only its owner can read, passed as ``-e @FILE`` (its path, not its content, is in
the unit).

Secrets an inventory names by environment variable (``become_password_env``,
``password_env``: every ``*_env`` setting) are not in a timer's or cron's environment: the job
reads them from an environment file whose owner and mode `deploy.jobenv` checks, or
``deploy schedule`` refuses in one line saying what the job would lack.

The timer is not ``Persistent``: a deploy missed while the workstation was off should not
fire at boot, in the middle of the day, without anyone choosing that.

Only this module knows unit-file and crontab syntax; the CLI passes a `Job` and prints.
"""

from __future__ import annotations

import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy.errors import InputError
from deploy.masking import is_secret_name

#: Seconds systemd waits beyond ``--timeout`` before killing the service itself.
BACKSTOP = 300
_WEEKDAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}
_SHORTHANDS = {
    "minutely": "* * * * *",
    "hourly": "0 * * * *",
    "daily": "0 0 * * *",
    "weekly": "0 0 * * 1",
    "monthly": "0 0 1 * *",
    "yearly": "0 0 1 1 *",
    "annually": "0 0 1 1 *",
}


@dataclass(frozen=True)
class Job:
    """A scheduled ``deploy apply``: what to run, against what, when, and where it reports."""

    name: str  # unit name without suffix, e.g. "deploy-kimi-eagle3"
    playbook: Path  # absolute
    inventory: Path  # absolute
    on_calendar: str
    workdir: Path
    report: Path
    log_file: Path
    timeout: float
    limit: tuple[str, ...] = ()
    extra_vars: tuple[str, ...] = ()
    notify_url: str | None = None
    #: A drift check: ``--check --detailed-exitcode`` (changes nothing; exit 5 on drift).
    check: bool = False
    #: The environment file the job reads its ``*_env`` secrets from (`deploy.jobenv`).
    env_file: Path | None = None
    #: What the job reads from it, one line each: ``BECOME_PW (become_password_env of gpu-1)``.
    env_needs: tuple[str, ...] = ()

    @property
    def service(self) -> str:
        return f"{self.name}.service"

    @property
    def timer(self) -> str:
        return f"{self.name}.timer"


def unit_name(playbook_name: str, *, check: bool = False) -> str:
    """``deploy-<name>`` (``deploy-check-<name>`` for a drift check) with anything systemd
    dislikes in a unit name replaced by ``-``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", playbook_name).strip("-.") or "playbook"
    return f"deploy-check-{slug}" if check else f"deploy-{slug}"


def deploy_command() -> list[str]:
    """How to start this very installation of deploy by absolute path.

    The console script beside the interpreter when there is one (what ``pip install`` puts
    in a venv's ``bin``), else ``python -m deploy.cli`` with this interpreter: never a bare
    ``deploy`` that a timer's PATH may resolve to another installation, or to nothing.
    """
    script = Path(sys.executable).parent / "deploy"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "deploy.cli"]


def apply_argv(job: Job) -> list[str]:
    """The full ``deploy apply`` command line of the job."""
    argv = [*deploy_command(), "apply", str(job.playbook), "-i", str(job.inventory)]
    for pattern in job.limit:
        argv += ["-l", pattern]
    for item in job.extra_vars:
        argv += ["-e", item]
    argv += ["--check", "--detailed-exitcode"] if job.check else ["--yes"]
    argv += ["--json", "--report", str(job.report), "--log-file", str(job.log_file)]
    argv += ["--timeout", f"{job.timeout:g}"]
    if job.notify_url:
        argv += ["--notify-url", job.notify_url]
    return argv


def check_secrets(extra_vars: Iterable[str], listed: Iterable[str] = ()) -> None:
    """Refuse a schedule that would put a secret where other users can read it.

    ``extra_vars``: the job's ``-e`` items as typed; ``listed``: the names the playbook and
    inventory declare in ``secret_vars``. Called after the items were parsed, so every item
    is ``NAME=VALUE`` or ``@FILE`` naming a readable YAML mapping.

    Raises:
        InputError: a secret-looking ``NAME=VALUE`` with a value, or an ``@FILE`` defining
            one that group or others may read.
    """
    names = list(listed)
    for item in extra_vars:
        if item.startswith("@"):
            path = Path(item[1:])
            try:
                document = yaml.safe_load(path.read_text(encoding="utf-8"))
                mode = path.stat().st_mode
            except (OSError, UnicodeError, yaml.YAMLError):
                continue  # parse_extra_vars already accepted it; nothing secret to find here
            secrets = sorted(
                str(key)
                for key, value in (document or {}).items()
                if value not in (None, "") and is_secret_name(str(key), names)
            )
            if secrets and mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise InputError(
                    f"{path} holds {', '.join(secrets)} but its mode is "
                    f"{stat.S_IMODE(mode):04o}: other users can read it; "
                    f"`chmod 600 {shlex.quote(str(path))}` before scheduling it"
                )
            continue
        name, _, value = item.partition("=")
        if value and is_secret_name(name, names):
            raise InputError(
                f"-e {name}=...: a scheduled job's command line is readable by every user "
                "(the unit file, ps); put the secret in a vars file only you can read "
                f"(chmod 600) and pass -e @FILE"
            )


def _systemd_word(arg: str) -> str:
    """Quote one ExecStart argument: ``%`` and ``$`` doubled (specifiers, variables)."""
    if "\n" in arg:
        raise InputError(f"a scheduled command cannot contain a newline: {arg!r}")
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./*!~-]+", arg):  # nothing systemd would interpret
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(text: str) -> str:
    """A unit-file value taken as written but for specifiers: ``%`` doubled."""
    if "\n" in text:
        raise InputError(f"a unit file value cannot contain a newline: {text!r}")
    return text.replace("%", "%%")


def _env_comment(job: Job, prefix: str) -> str:
    """The lines that document the job's environment file where the job is written."""
    needs = [f"{prefix}  {need}" for need in job.env_needs] or [f"{prefix}  (none named yet)"]
    return "\n".join(
        [
            f"{prefix} Secrets, from an owner-only (0600) file of NAME='value' lines, checked by",
            f"{prefix} `deploy schedule` (see docs/operations.md, Scheduling). The job reads:",
            *needs,
        ]
    )


def render_service(job: Job) -> str:
    command = " ".join(_systemd_word(arg) for arg in apply_argv(job))
    environment = ""
    if job.env_file is not None:
        environment = f"{_env_comment(job, '#')}\nEnvironmentFile={_literal(str(job.env_file))}\n"
    return f"""# Generated by `deploy schedule`; run it again to change the job.
[Unit]
Description={_literal(f"deploy apply {job.playbook.name}{' --check' if job.check else ''} (inventory {job.inventory})")}

[Service]
Type=oneshot
WorkingDirectory={_literal(str(job.workdir))}
Environment=NO_COLOR=1
{environment}ExecStart={command}
TimeoutStartSec={int(job.timeout) + BACKSTOP}
"""


def render_timer(job: Job) -> str:
    return f"""# Generated by `deploy schedule`; run it again to change the job.
[Unit]
Description={_literal(f"Run {job.service} on schedule ({job.on_calendar})")}

[Timer]
OnCalendar={job.on_calendar}
# A deploy missed while this machine was off must not fire unasked at the next boot.
Persistent=false
AccuracySec=1min
Unit={job.service}

[Install]
WantedBy=timers.target
"""


def check_calendar(expression: str) -> str | None:
    """Check an ``OnCalendar`` expression with ``systemd-analyze calendar`` when available.

    Returns systemd's normalized form, or None when systemd-analyze is not installed (the
    expression is then checked when the timer is loaded).

    Raises:
        InputError: systemd rejects the expression.
    """
    if "\n" in expression or not expression.strip():
        raise InputError(f"--on-calendar: not a calendar expression: {expression!r}")
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    proc = subprocess.run(
        [tool, "calendar", expression], capture_output=True, text=True, timeout=30, check=False
    )
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["rejected"])[-1]
        raise InputError(f"--on-calendar {expression!r}: {why} (see man systemd.time)")
    for line in proc.stdout.splitlines():
        if "Normalized form:" in line:
            return line.split(":", 1)[1].strip()
    return None


def _cron_field(value: str, low: int, high: int, what: str) -> str:
    """One systemd time component (``*``, ``5``, ``1,15``, ``8..18``, ``0/15``) for cron."""
    parts = []
    for part in value.split(","):
        match = re.fullmatch(r"(\*|\d+)(?:\.\.(\d+))?(?:/(\d+))?", part)
        if match is None:
            raise ValueError(f"cannot express {what} {part!r} in cron")
        start, end, step = match.groups()
        if start == "*" and end is not None:
            raise ValueError(f"cannot express {what} {part!r} in cron")
        numbers = [int(n) for n in (start, end) if n not in (None, "*")]
        if any(n < low or n > high for n in numbers):
            raise ValueError(f"{what} {part!r} is out of range {low}-{high}")
        start, end = (v if v in (None, "*") else str(int(v)) for v in (start, end))
        text = start if end is None else f"{start}-{end}"
        if step is not None:
            if start != "*" and end is None:  # systemd's "5/15" starts at 5: cron's 5-59/15
                text = "*" if int(start) == low else f"{start}-{high}"
            text += f"/{step}"
        parts.append(text)
    return ",".join(parts)


def _cron_weekdays(token: str) -> str:
    out = []
    for part in token.lower().split(","):
        names = part.split("..")
        if len(names) > 2 or any(name[:3] not in _WEEKDAYS for name in names):
            raise ValueError(f"unknown weekday {part!r}")
        numbers = [_WEEKDAYS[name[:3]] for name in names]
        out.append("-".join(str(n) for n in numbers))
    return ",".join(out)


def cron_schedule(expression: str) -> str:
    """The five cron fields for an ``OnCalendar`` expression (a common subset of it).

    Handles the shorthands (``daily``, ``weekly``...) and ``[WEEKDAYS] [*-MM-DD] HH:MM[:00]``
    with lists, ranges and repetitions (``Mon..Fri *-*-* 08..18:0/30``). Anything else —
    seconds other than 0, years, time zones — has no crontab equivalent.

    Raises:
        InputError: the expression cannot be written as a crontab schedule.
    """
    text = expression.strip()
    if text.lower() in _SHORTHANDS:
        return _SHORTHANDS[text.lower()]
    try:
        tokens = text.split()
        weekdays = "*"
        if tokens and re.match(r"[A-Za-z]", tokens[0]):
            weekdays = _cron_weekdays(tokens.pop(0))
        day, month = "*", "*"
        if tokens and "-" in tokens[0]:
            year, month_text, day_text = [*tokens.pop(0).split("-"), "", ""][:3]
            if year != "*":
                raise ValueError("cron has no years")
            month = _cron_field(month_text, 1, 12, "month")
            day = _cron_field(day_text, 1, 31, "day")
        clock = tokens.pop(0) if tokens else "00:00:00"
        if tokens:
            raise ValueError(f"unexpected {' '.join(tokens)!r} (time zones are not supported)")
        pieces = clock.split(":")
        if len(pieces) not in (2, 3) or (len(pieces) == 3 and int(pieces[2] or "x") != 0):
            raise ValueError("cron runs on whole minutes: give HH:MM (seconds must be 00)")
        hour = _cron_field(pieces[0], 0, 23, "hour")
        minute = _cron_field(pieces[1], 0, 59, "minute")
    except (ValueError, IndexError) as exc:
        raise InputError(
            f"--on-calendar {expression!r} has no crontab equivalent: {exc}; "
            "simplify it, or use the systemd timer (without --cron)"
        ) from None
    return f"{minute} {hour} {day} {month} {weekdays}"


def cron_line(job: Job) -> str:
    """A crontab entry (with a comment line naming it) for the job."""
    command = " ".join(shlex.quote(arg) for arg in apply_argv(job))
    body = f"cd {shlex.quote(str(job.workdir))} && "
    if job.env_file is not None:  # exported to deploy only: `set -a` marks what `.` sets
        body += f"set -a && . {shlex.quote(str(job.env_file))} && set +a && "
    body += f"{command} >/dev/null"
    # cron turns an unescaped % into a newline; stderr stays, so cron mails only problems.
    body = body.replace("%", "\\%")
    schedule = cron_schedule(job.on_calendar)
    what = f"{job.playbook.name} --check" if job.check else job.playbook.name
    header = f"# {job.name}: deploy apply {what} ({job.on_calendar})\n"
    if job.env_file is not None:
        header += f"{_env_comment(job, '#')}\n"
    return f"{header}{schedule} {body}\n"


def user_unit_dir(config_home: Path) -> Path:
    """Where systemd looks for a user's own units: ``$XDG_CONFIG_HOME/systemd/user``."""
    return config_home / "systemd" / "user"


def install(job: Job, directory: Path) -> list[Path]:
    """Write the service and timer into ``directory``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in ((job.service, render_service(job)), (job.timer, render_timer(job))):
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def enable_hint(job: Job) -> str:
    """What to run after `install` (not run for the user: it changes their session)."""
    return (
        f"systemctl --user daemon-reload && systemctl --user enable --now {job.timer}\n"
        "(and `loginctl enable-linger` so that it also runs while you are logged out)"
    )
