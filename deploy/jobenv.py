"""A scheduled job's environment file: the secrets a run reads from ``*_env`` variables.

An inventory names its secrets by environment variable (``password_env``,
``become_password_env``: any host setting ending in ``_env``), never by value. In the shell
the operator exported them; systemd and cron start a job with an almost empty environment, so
a job scheduled as typed would fail every night on "BECOME_PW is not set". `deploy schedule`
therefore finds every such variable the job's hosts name (`required_env`) and either writes the
job with an environment file that sets them, or refuses in one line saying what the job would
lack.

The file (default ``$XDG_CONFIG_HOME/deploy/env/UNIT.env``, or ``--env-file FILE``) is written
by the operator, never by deploy: deploy does not copy a secret out of its own environment into
a file. Its format is the subset that systemd's ``EnvironmentFile=`` and a POSIX shell's ``.``
read alike, so one file serves the timer and the crontab line (which sources it with
``set -a``): ``NAME=value`` lines, the value single-quoted when it holds anything but letters,
digits and ``_@%+=:,./~-`` (``NAME='p@ss word!'``; a value cannot contain ``'``), blank lines
and ``#`` comments. `check_env_file` refuses, before the job is written:

- a file that is missing, is not a regular file, or is a symbolic link (opened with
  ``O_NOFOLLOW`` and judged by ``fstat`` on that descriptor, not by path);
- a file another user owns, or that group or others may read or write (it must be ``0600``
  or stricter: it holds passwords);
- a file in a directory that another user may write (who could replace it before the run);
- a line that is not in the format above (named by line number, never by its value);
- a file that does not set, with a non-empty value, every variable the job needs.

The unit carries ``EnvironmentFile=`` (without ``-``: a file deleted later fails the job
loudly rather than running it without its secrets) under a comment naming each variable and
the setting that wants it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from deploy.errors import InputError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./~-]*")
_QUOTED = re.compile(r"'[^']*'")
#: An environment file larger than this is not one a human wrote for a job.
_MAX_BYTES = 1 << 16


@dataclass(frozen=True)
class Needed:
    """One environment variable the job reads, and which settings of which hosts want it."""

    name: str
    wanted_by: tuple[str, ...]  # e.g. ("become_password_env of gpu-node-01", ...)

    def describe(self) -> str:
        """``BECOME_PW (become_password_env of gpu-1, gpu-2)``: short, one line."""
        by_setting: dict[str, list[str]] = {}
        for item in self.wanted_by:
            setting, _, host = item.partition(" of ")
            by_setting.setdefault(setting, []).append(host)
        parts = []
        for setting, hosts in by_setting.items():
            shown = ", ".join(hosts[:2]) + (f" and {len(hosts) - 2} more" if len(hosts) > 2 else "")
            parts.append(f"{setting} of {shown}")
        return f"{self.name} ({'; '.join(parts)})"


def required_env(hosts: Iterable[tuple[str, BaseModel]]) -> list[Needed]:
    """Every environment variable named by a ``*_env`` setting of ``hosts``, in first-seen order.

    ``hosts``: (name, settings) pairs, the settings as resolved for the job (inventory, group,
    ``-e`` and ``--limit`` applied). A setting is found by its name, so a future ``*_env``
    setting is covered without a change here.
    """
    found: dict[str, list[str]] = {}
    for host, spec in hosts:
        for field in type(spec).model_fields:
            value = getattr(spec, field)
            if field.endswith("_env") and isinstance(value, str) and value:
                found.setdefault(value, []).append(f"{field} of {host}")
    return [Needed(name, tuple(by)) for name, by in found.items()]


def default_env_file(config_home: Path, unit: str) -> Path:
    """``$XDG_CONFIG_HOME/deploy/env/UNIT.env``: beside the operator's other configuration."""
    return config_home / "deploy" / "env" / f"{unit}.env"


def parse_env_file(text: str, path: Path) -> dict[str, str]:
    """``NAME=value`` lines (see the module docstring) as a mapping, quotes removed.

    Raises:
        InputError: a line outside the format, named by ``path:line`` and never quoted (it may
            hold a secret).
    """
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not _NAME.fullmatch(name):
            raise InputError(f"{path}:{number}: not a NAME=value line (the value is not shown)")
        if _QUOTED.fullmatch(value):
            value = value[1:-1]
        elif not _PLAIN.fullmatch(value):
            raise InputError(
                f"{path}:{number}: the value of {name} must be single-quoted "
                f"({name}='...', without ' inside) so that systemd and sh read it alike"
            )
        values[name] = value
    return values


def _read_trusted(path: Path) -> str:
    """The file's text, read through one descriptor after checking who may change it."""
    parent = os.stat(path.parent)
    uid = os.geteuid()
    if parent.st_uid not in (0, uid) or (
        parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX
    ):
        raise InputError(
            f"{path.parent} may be written by other users, who could replace {path.name} "
            "before the job runs; keep the environment file in a directory only you can write"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        if os.path.islink(path):
            raise InputError(
                f"{path} is a symbolic link; give the environment file itself"
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path} is not a regular file")
        if info.st_uid != uid:
            raise InputError(
                f"{path} belongs to uid {info.st_uid}, not to you (uid {uid}): "
                f"the job's secrets must be yours alone; `chown {uid} {path}`"
            )
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InputError(
                f"{path} is mode {stat.S_IMODE(info.st_mode):04o}: other users can read the "
                f"job's secrets; `chmod 600 {path}`"
            )
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise InputError(f"{path} is larger than {_MAX_BYTES} bytes: not an environment file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None


def check_env_file(path: Path, needed: Iterable[Needed], *, given: bool) -> Mapping[str, str]:
    """Check the job's environment file; return what it sets (for tests: never printed).

    ``given``: the operator named the file (``--env-file``); otherwise it is the default path
    and its absence is explained as what the job would lack.

    Raises:
        InputError: one line saying what the job would lack or why the file is refused.
    """
    wanted = list(needed)
    names = " ".join(f"{n.name}='...'" for n in wanted) or "NAME='...'"
    try:
        text = _read_trusted(path)
    except FileNotFoundError:
        if given or not wanted:
            raise InputError(f"--env-file {path}: no such file") from None
        lacking = ", ".join(n.describe() for n in wanted)
        raise InputError(
            f"the job would lack {lacking}: systemd and cron do not pass your shell's "
            f"environment; write {names} into {path} (chmod 600), or give --env-file FILE"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read the environment file {path}: {exc.strerror}") from None
    values = parse_env_file(text, path)
    missing = [n for n in wanted if not values.get(n.name)]
    if missing:
        raise InputError(
            f"the job would lack {', '.join(n.describe() for n in missing)}: "
            f"{path} does not set {'it' if len(missing) == 1 else 'them'}"
        )
    return values
