"""The drop-in deploy owns for a systemd unit: where the declared changes to its server live.

A unit's command line is the unit's, not the running process's: ``/proc/PID/cmdline`` holds
``$VAR`` and ``${VAR}`` already expanded (an API key from ``EnvironmentFile=`` among them), so
the drop-in is computed from the unit's own text as ``systemctl cat UNIT`` prints it (the unit
file, then its drop-ins in the order systemd applies them). One file holds every change deploy
manages for the unit, from any playbook: ``UNIT_DIR/UNIT.d/90-deploy.conf`` (sorting after an
operator's ``override.conf`` and ``50-*.conf``)::

    [Service]
    ExecStart=
    ExecStart=<the effective ExecStart with the declared args changes>
    Environment="NAME=value"      (the declared env changes, and those of earlier runs)
    UnsetEnvironment=NAME

The empty ``ExecStart=`` resets the list, so the next line replaces the unit's command rather
than adding a second one. Because the effective ExecStart already includes this file's earlier
line, changes accumulate across runs and playbooks. The unit file and the operator's drop-ins
are never written. Pure functions: `deploy.steps.service_systemd` does the I/O.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from deploy.edits.cmdline import derive_argv, derive_env, masked_argv, masked_env

#: How a systemd unit's server is restarted (docs/operations.md shows this text).
SYSTEMD_RULE = """
A server whose process belongs to a systemd system unit — its ``/proc/PID/cgroup`` names a
``.service`` outside ``user.slice`` (``0::/system.slice/sglang.service``) — is systemd's: it is
stopped and started with ``systemctl``, never signalled by deploy. ``manager: auto``
(kimi-eagle3's default, ``sglang_manager``) finds the unit that way; ``manager: systemd`` names
it (``unit``, kimi-eagle3's ``sglang_unit``) or detects it too; ``manager: process`` refuses a
unit's server before anything is touched (exit 4), in one line naming the unit.

A restart's declared ``args``/``env`` changes go into one drop-in deploy owns,
``UNIT_DIR/UNIT.d/90-deploy.conf`` (``unit_dir``, default ``/etc/systemd/system``; it sorts
after an operator's ``override.conf``): ``ExecStart=`` (a reset), then the unit's effective
ExecStart — read with ``systemctl cat``, never from ``/proc`` argv, which holds ``$VAR``
already expanded — with the changes applied as SGLang's argparse reads flags, and
``Environment=``/``UnsetEnvironment=`` for the environment. Changes accumulate in that file
across runs and playbooks; the unit file and other drop-ins are never written. The plan shows
the drop-in as a diff (secret-looking values as ``***``). The file is written like every file
change (journaled, a saved copy, atomic), then ``systemctl daemon-reload``, stop and start, so
the change survives a later ``systemctl restart``. Undo puts the drop-in back byte for byte
(or removes it, and ``UNIT.d`` if deploy created it), runs ``daemon-reload``, then
``reset-failed`` (a crash loop's start limit cannot block it) and ``start``.

Refused before anything is touched (exit 4): a unit with edits systemd has not loaded
(``NeedDaemonReload=yes``), since deploy's ``daemon-reload`` would deploy them unreviewed;
``deploy rollback`` refuses them the same way (touching nothing) once the run's own reload
was made, rather than load them with deploy's drop-in put back.
Said as a note in the plan and the report: a ``TimeoutStopSec`` shorter than the service's
``drain_timeout`` (systemd's stop is then the drain, and kills the server at its end). Who
holds the port is judged as for any server (the rule above), with the unit's ``User=``
counting as the service naming that user: systemd starts the server again as it. The checks
before the stop that run the new command line (draft model, argparse) run on the unit's
server as the kernel shows it, as for any server.
"""

#: deploy's drop-in, in ``UNIT.d/``: after an operator's ``override.conf`` and ``50-*.conf``.
DROPIN_NAME = "90-deploy.conf"

HEADER = (
    "# Owned by deploy: every change deploy manages for this unit (`deploy rollback` puts the\n"
    "# previous version back). Change the unit file or your own drop-in, not this file.\n"
)

#: ExecStart= prefixes (systemd.service(5)): kept on the program as written.
_PREFIXES = "@-:+!"
#: Words systemd reads back unchanged without quotes.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./${}-]+")


def dropin_path(unit_dir: str, unit: str) -> str:
    """Where deploy's drop-in for ``unit`` lives."""
    return f"{unit_dir.rstrip('/') or ''}/{unit}.d/{DROPIN_NAME}"


@dataclass
class UnitText:
    """What ``systemctl cat`` says of a unit: each file's path and its ``[Service]`` settings."""

    #: (path, [(key, value)...]) per file, in the order systemd applies them.
    files: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)

    def exec_start(self, *, skip: str | None = None) -> str | None:
        """The effective ExecStart= (the last one after the last reset), or None: without
        the file ``skip``."""
        value: list[str] = []
        for path, settings in self.files:
            if path == skip:
                continue
            for key, text in settings:
                if key == "ExecStart":
                    value = [text] if text else []
        return value[-1] if value else None


def parse_cat(text: str) -> UnitText:
    """``systemctl cat UNIT``'s output: ``# /path`` before each file, then its lines
    (continuation lines ending in a backslash joined, comments skipped)."""
    unit = UnitText()
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.startswith("# /"):
            unit.files.append((line[2:].strip(), []))
            section = ""
            continue
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service" or "=" not in line or not unit.files:
            continue
        key, _, value = line.partition("=")
        unit.files[-1][1].append((key.strip(), value.strip()))
    return unit


def split_exec(value: str) -> tuple[str, list[str]]:
    """An ExecStart= value as (its prefixes, its words)."""
    stripped = value.lstrip(_PREFIXES)
    return value[: len(value) - len(stripped)], shlex.split(stripped)


def _quote(word: str, new: bool) -> str:
    """``word`` as systemd reads it back: a new value (not in the unit's own line) gets ``%``
    and ``$`` doubled, so a specifier or a variable is never expanded from it."""
    if new:
        word = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quote_env(name: str, value: str) -> str:
    """One Environment= assignment, quoted (systemd expands specifiers there, not ``$``)."""
    text = f"{name}={value}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def join_exec(prefix: str, words: list[str], original: list[str]) -> str:
    """An ExecStart= value of ``words`` (``original``'s words are written as they were)."""
    known = set(original)
    return prefix + " ".join(_quote(word, word not in known) for word in words)


def parse_env(settings: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """Environment= and UnsetEnvironment= of one file (deploy's own drop-in)."""
    env: dict[str, str] = {}
    unset: list[str] = []
    for key, value in settings:
        if key == "Environment":
            for item in shlex.split(value):
                name, _, val = item.partition("=")
                env[name] = val.replace("%%", "%")
                if name in unset:
                    unset.remove(name)
        elif key == "UnsetEnvironment":
            for name in shlex.split(value):
                env.pop(name, None)
                if name not in unset:
                    unset.append(name)
    return env, unset


@dataclass
class DropIn:
    """deploy's drop-in for a unit, before and after the declared changes."""

    path: str
    before: bytes | None
    after: bytes
    argv: list[str]
    #: The command line before the changes: for the summary's diff.
    old_argv: list[str]

    @property
    def changed(self) -> bool:
        return self.before != self.after


def compute(
    unit: UnitText,
    path: str,
    before: bytes | None,
    changes: Any,
    match: str,
) -> DropIn:
    """deploy's drop-in once ``changes`` (`deploy.services.desired.Changes`) are applied to
    the unit as ``systemctl cat`` shows it (deploy's own drop-in included, at ``path``).

    Raises:
        ValueError: the unit has no ExecStart= to change.
    """
    value = unit.exec_start()
    if value is None:
        raise ValueError("the unit has no ExecStart= (systemctl cat shows none)")
    prefix, words = split_exec(value)
    argv = derive_argv(words, dict(changes.set), list(changes.remove), match)
    ours = next((settings for file, settings in unit.files if file == path), [])
    env, unset = parse_env(ours)
    set_env = {k: v for k, v in changes.env_set.items() if v != ""}
    env = derive_env(env, set_env, list(changes.env_unset))
    unset = [name for name in [*unset, *changes.env_unset] if name not in env]
    if argv == words and not env and not unset and before is None:
        return DropIn(path, None, b"", argv, words)  # nothing to manage: no file
    lines = [HEADER, "[Service]\n", "ExecStart=\n", f"ExecStart={join_exec(prefix, argv, words)}\n"]
    for name, val in env.items():
        lines.append(f"Environment={_quote_env(name, val)}\n")
    for name in dict.fromkeys(unset):
        lines.append(f"UnsetEnvironment={name}\n")
    return DropIn(path, before, "".join(lines).encode(), argv, words)


def shown(content: bytes) -> bytes:
    """The drop-in as the plan shows it: secret-looking Environment= values as ``***``."""
    out = []
    for line in content.decode("utf-8", "replace").splitlines(keepends=True):
        if line.startswith("Environment="):
            env = parse_env([("Environment", line[len("Environment=") :].strip())])[0]
            if masked_env(env) != env:  # else as written
                masked = masked_env(env)
                line = "Environment=" + " ".join(f"{k}={v}" for k, v in masked.items()) + "\n"
        elif line.startswith("ExecStart=") and line.strip() != "ExecStart=":
            prefix, words = split_exec(line[len("ExecStart=") :].strip())
            if masked_argv(words) != words:  # else as written
                line = "ExecStart=" + prefix + " ".join(masked_argv(words)) + "\n"
        out.append(line)
    return "".join(out).encode()


#: systemd time spans as ``systemctl show`` prints them (``1min 30s``, ``500ms``, ``infinity``).
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def timespan(text: str) -> float | None:
    """Seconds of a systemd time span; None for ``infinity`` or nothing readable."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total = 0.0
    found = False
    for number, unit in _SPAN.findall(text):
        total += float(number) * _UNIT_S[unit or None]
        found = True
    return total if found else None


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B UNIT``'s ``KEY=value`` lines."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
