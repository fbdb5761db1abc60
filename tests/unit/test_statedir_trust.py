"""The state_dir check of the lock's exec, run by a local shell on directories made here.

Root (CI) can make directories owned by another user; the owner cases are skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.remote.lock import lock_script

NOBODY = 65534
#: The shell every check here runs in: bash (a login shell), and POSIX sh (Debian's dash, as
#: under become): both take the login user's uid from ``[ -O / ]`` or ``id -u`` (issue 17).
SHELL = ["bash"]


@pytest.fixture(autouse=True, params=["bash", "sh"])
def shell(request: pytest.FixtureRequest) -> None:
    SHELL[0] = request.param


def run(state: Path | str, env: dict[str, str] | None = None) -> str:
    script = lock_script(str(state), "h", agent="x").replace(hostsh.text("loop.sh"), "echo LOOP\n")
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


#: A ``stat`` first on PATH: the real one, then — once — the attacker's move (as uid nobody) of
#: a planted directory into the place of the state_dir the check has just judged absent.
_RACING_STAT = """#!/bin/sh
/usr/bin/stat "$@"; _s=$?
if [ ! -e {marker} ]; then
  : > {marker}
  setpriv --reuid={uid} --regid={uid} --clear-groups -- mv -T -- {planted} {state} 2>/dev/null
fi
exit $_s
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_dir_renamed_into_place_after_the_check_is_never_used() -> None:
    """Issue 32 point 3: state_dir under a sticky world-writable directory, not there yet.
    Another user renames a directory of theirs (a planted run, a ``lock``) into its place
    right after the first judgement: what is used must be what the lock's shell created and
    then judged, never the planted directory."""
    base = Path(tempfile.mkdtemp(prefix="deploy-race-", dir="/tmp"))  # reachable by nobody
    try:
        _race(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _race(base: Path) -> None:
    base.chmod(0o711)
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "planted"
    (planted / "runs" / "20260101T000000Z-planted").mkdir(parents=True)
    for path in [planted, *planted.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    state = sticky / "state"
    bin_dir = base / "bin"
    bin_dir.mkdir()
    racing = bin_dir / "stat"
    racing.write_text(
        _RACING_STAT.format(marker=base / "moved", uid=NOBODY, planted=planted, state=state)
    )
    racing.chmod(0o755)
    said = run(state, {"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert (base / "moved").exists()  # the attacker did move in
    if state.exists() and state.stat().st_uid == NOBODY:
        assert said == f"UNTRUSTED\t{state}\tis owned by nobody (uid {NOBODY})"
    else:  # the move came too late: the state_dir is ours
        assert said.startswith("LOCKED") and state.stat().st_uid == 0
    owned = [p for p in [state, *state.rglob("*")] if p.exists() and p.lstat().st_uid == 0]
    assert not owned or state.stat().st_uid == 0, f"root wrote in the planted dir: {owned}"


@pytest.mark.parametrize("name", ["state x ; touch y", "$(touch z) `touch z`", "x\ntouch y\n"])
def test_a_name_with_spaces_metacharacters_or_line_breaks_is_judged_as_any_other(
    base: Path, name: str
) -> None:
    """stat's lines are paired with the paths asked for, never parsed for a name: a line
    break in state_dir's name once split its line and got our own directory refused."""
    state = base / name
    assert run(state).startswith("LOCKED")  # created, then judged once it exists
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700
    assert run(state).startswith("LOCKED")  # there already: judged before it is used
    assert not (base / "y").exists() and not (base / "z").exists()
    if os.geteuid() == 0:
        os.chown(state, NOBODY, NOBODY)
        refused = f"UNTRUSTED\t{state}\tis owned by nobody (uid {NOBODY})"
        assert run(state) == refused.split("\n")[0]  # the first line (a line break ends it)
        assert len(list(state.iterdir())) == 2  # runs and lock, nothing added
