"""A real unprivileged user on the sandbox host, and a way to run code as that user.

The attacks of issue 14 are run by a process whose real and effective uid and gid are
`ATTACKER_UID` (``setpriv``; the suite runs as root, as CI does), on this machine, against the
files root's `deploy` run touches through the sandbox's local sshd. The user is created by the
fixture if it does not exist (``useradd``, no home, no login shell).

Each attack loops for a bounded time *and* a bounded count, and publishes one row for
``docs/reliability.md``: tries, successes (the goal is 0), and what it left on the host
(`record_attack`). ``DEPLOY_ATTACK_CODE`` labels the code under attack (e.g. "main",
"hostile+fileops") when the same suite is run against several trees.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ATTACKER_UID = 1234
ATTACKER_NAME = "deploy-attacker"
#: The system interpreter: pyenv's lives under /root (0700), which the attacker cannot enter.
ATTACKER_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Attacker:
    uid: int
    gid: int
    name: str

    def argv(self, *command: str) -> list[str]:
        """``command`` run with this user's uid and gid, and no supplementary groups."""
        return [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--",
            *command,
        ]

    def python(self, code: str, *args: str) -> subprocess.Popen[str]:
        """Start ``code`` in the system Python as this user; it prints its figures as JSON."""
        return subprocess.Popen(
            self.argv(ATTACKER_PYTHON, "-c", code, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )

    def run(self, code: str, *args: str, timeout: float = 60) -> dict[str, object]:
        proc = self.python(code, *args)
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        result: dict[str, object] = json.loads(out)
        return result


def _ensure_user() -> Attacker:
    try:
        entry = pwd.getpwuid(ATTACKER_UID)
    except KeyError:
        # Not check=True: another pytest-xdist worker may create the user meanwhile (useradd
        # then exits 4 or 9); whoever made it, the user must exist now.
        made = subprocess.run(
            [
                "useradd",
                "--uid",
                str(ATTACKER_UID),
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                ATTACKER_NAME,
            ],
            capture_output=True,
            text=True,
        )
        try:
            entry = pwd.getpwuid(ATTACKER_UID)
        except KeyError:
            raise AssertionError(f"useradd failed: {made.stderr.strip()}") from None
    return Attacker(entry.pw_uid, entry.pw_gid, entry.pw_name)


@pytest.fixture(scope="session")
def attacker() -> Attacker:
    if os.geteuid() != 0:
        pytest.skip("the attacker suite creates a user and switches to it: run as root")
    if shutil.which("setpriv") is None or not Path(ATTACKER_PYTHON).exists():
        pytest.skip(f"needs setpriv and {ATTACKER_PYTHON}")
    return _ensure_user()


@pytest.fixture
def arena(attacker: Attacker) -> Iterator[Path]:
    """A root-owned 0711 directory under /tmp the attacker can traverse but not list or write.

    (pytest's own tmp_path is 0700: no other user can reach anything in it.)
    """
    root = Path(tempfile.mkdtemp(prefix="deploy-attack-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def attacker_dir(attacker: Attacker, path: Path, mode: int = 0o755) -> Path:
    """A directory owned by the attacker (who can therefore rename anything inside it)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, attacker.uid, attacker.gid)
    path.chmod(mode)
    return path


def root_only_file(path: Path, content: bytes) -> Path:
    """A file only root may read: the prize of a redirected read or write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o600)
    return path


def describe(path: Path) -> str:
    """Mode, owner and kind of ``path`` for the 'left on the host' column."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return f"{path.name}: missing"
    kind = "symlink" if stat.S_ISLNK(info.st_mode) else "file"
    return f"{path.name}: {kind} {stat.S_IMODE(info.st_mode):04o} uid {info.st_uid}"


def record_attack(name: str, tries: int, successes: int, left: str, note: str = "") -> None:
    """One row of the attacks table in docs/reliability.md (see tools.reliability)."""
    target = os.environ.get("DEPLOY_RELIABILITY_RECORD")
    if not target:
        return
    line = {
        "kind": "attack",
        "name": name,
        "tries": tries,
        "successes": successes,
        "left": left,
        "note": note,
        "code": os.environ.get("DEPLOY_ATTACK_CODE", ""),
    }
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
