"""The lock's trust check against an ``EUID`` in the environment, end to end: the real lock
script and session loop on a `LocalHost` as root.

An attacker who owns a state_dir could plant what the run reads or runs from there. If the
session's environment brings ``EUID=<the attacker's uid>`` (sshd SetEnv/AcceptEnv, sudo
keeping the environment, pam_env) and the trust check believed bash's ``$EUID``, root would
take the attacker's directory for its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy.errors import StateDirUntrusted
from deploy.remote.lock import acquire
from tests.unit.local_host import LocalHost

NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_an_euid_in_the_environment_never_gets_another_users_state_dir_trusted(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    state = tmp_path / "attacker-state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    with LocalHost("local", home=str(home), env={"EUID": str(NOBODY)}) as host:
        try:
            lock = acquire(host, str(state), {"run_id": "t"})
        except StateDirUntrusted:
            lock = None
        if lock is not None:
            lock.release()
    assert lock is None, "another user's state_dir was trusted"
