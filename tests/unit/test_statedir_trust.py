"""The state_dir check of the lock's exec, run by a local shell on directories made here.

Root (CI) can make directories owned by another user; the owner cases are skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from deploy.remote.lock import _SCRIPT
from deploy.statedir.layout import scan_script
from deploy.statedir.trust import TRUST_CHECK

NOBODY = 65534
#: The shell every check here runs in: bash (a login shell), and POSIX sh (Debian's dash, as
#: under become): both take the login user's uid from ``[ -O / ]`` or ``id -u`` (issue 17).
SHELL = ["bash"]


@pytest.fixture(autouse=True, params=["bash", "sh"])
def shell(request: pytest.FixtureRequest) -> None:
    SHELL[0] = request.param


def run(state: Path | str, env: dict[str, str] | None = None) -> str:
    script = _SCRIPT.format(
        state="'" + str(state) + "'",
        trust=TRUST_CHECK,
        agent="x",
        boot="x",
        helper_python="''",
        scan=scan_script("_dS"),
        ahead="''",
        holder="h",
        loop="echo LOOP\n",
    )
    proc = subprocess.run(
        [SHELL[0], "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=None if env is None else {**os.environ, **env},
    )
    return proc.stdout.splitlines()[0] if proc.stdout else proc.stderr


@pytest.fixture
def base(tmp_path: Path) -> Path:
    tmp_path.chmod(0o700)
    return tmp_path


def test_missing_state_dir_is_created_0700_and_locked(base: Path) -> None:
    assert run(base / "a" / "state").startswith("LOCKED")
    assert (base / "a" / "state").stat().st_mode & 0o777 == 0o700
    assert (base / "a").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_group_or_world_writable_state_dir_is_refused_even_sticky(base: Path, mode: int) -> None:
    state = base / "state"
    state.mkdir()
    state.chmod(mode)
    assert run(state) == (
        f"UNTRUSTED\t{state}\tis writable by group or others (mode {mode:o}, owner root)"
    )
    assert not (state / "lock").exists() and not (state / "runs").exists()


def test_writable_parent_is_refused_unless_root_owned_and_sticky(base: Path) -> None:
    parent = base / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    assert run(parent / "state").startswith(f"UNTRUSTED\t{parent}\tis writable")
    parent.chmod(0o1777)  # like /tmp
    assert run(parent / "state").startswith("LOCKED")


@pytest.mark.parametrize("what", ["lock", "runs"])
def test_symlinks_inside_are_refused_and_never_written_through(base: Path, what: str) -> None:
    state = base / "state"
    state.mkdir(mode=0o700)
    prize = base / "prize"
    prize.write_text("root only\n")
    (state / what).symlink_to(prize)
    assert run(state) == f"UNTRUSTED\t{state / what}\tis a symbolic link"
    assert prize.read_text() == "root only\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_other_owner_is_named_for_the_dir_or_for_a_symlinked_parent(base: Path) -> None:
    state = base / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    assert run(state) == f"UNTRUSTED\t{state}\tis owned by nobody (uid {NOBODY})"
    real = base / "real"
    real.mkdir(mode=0o755)
    link = base / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    assert run(link / "state") == f"UNTRUSTED\t{link}\tis owned by nobody (uid {NOBODY})"
    os.lchown(link, 0, 0)
    real.chmod(0o777)  # the resolved path is checked too
    assert run(link / "state").startswith(f"UNTRUSTED\t{real}\tis writable")


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_the_users_uid_is_never_taken_from_the_environment(base: Path) -> None:
    """bash makes ``$EUID`` read-only only when it is not in the environment: an ``EUID``
    imported (sshd's SetEnv/AcceptEnv, sudo keeping the environment, pam_env) is an ordinary
    variable. The trust rule must not accept another user's state_dir because of it."""
    state = base / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    for env in ({"EUID": str(NOBODY)}, {"EUID": str(NOBODY), "BASH_VERSION": "5"}):
        assert run(state, env) == f"UNTRUSTED\t{state}\tis owned by nobody (uid {NOBODY})"
    assert not (state / "runs").exists()
