"""A host whose login shell is slow: the lock's exec waits the host's ``lock_timeout``.

The lock's exec is the run's first command on a host: the login shell (root's ``.bashrc``
runs ``pyenv init``, a loaded host's much more), the state_dir checks, the lock. It used to
give up after a fixed 30 s of silence, which 100 hosts at once on a loaded workstation went
past (docs/performance.md, "Fleet scale"); now the inventory says how long, and the message
says which setting to raise. Here the sandbox's login shell sleeps 4 s (``BASH_ENV``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.sandbox.sshd import SshdSandbox
from tests.integration.conftest import Deploy

pytestmark = pytest.mark.ssh

PLAYBOOK = {
    "name": "one-line",
    "hosts": "all",
    "steps": [{"lineinfile": {"path": "{{ root }}/conf.txt", "line": "b=2"}}],
}


def _inventory(path: Path, entry: dict[str, Any], lock_timeout: float) -> Path:
    path.write_text(yaml.safe_dump({"hosts": {"slow": {**entry, "lock_timeout": lock_timeout}}}))
    return path


def test_a_slow_login_is_waited_for_up_to_the_hosts_lock_timeout(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> None:
    sleeper = tmp_path / "slow-login.sh"
    # Once per login: every bash the login starts (pyenv's scripts are bash) reads BASH_ENV.
    sleeper.write_text('[ -n "$SLOW_LOGIN" ] || { export SLOW_LOGIN=1; sleep 4; }\n')
    host = sshd_sandbox.start("slow", env={"BASH_ENV": str(sleeper)})
    target = host.root / "conf.txt"
    target.write_text("a=1\n")
    playbook = tmp_path / "one-line.yaml"
    playbook.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False))

    short = _inventory(tmp_path / "short.yaml", host.inventory_entry(), 1)
    refused = Deploy(tmp_path, short)("apply", str(playbook), "--yes")
    assert refused.exit_code == 4, refused.output
    assert "no answer for 1 s while taking the lock" in refused.output
    assert "lock_timeout" in refused.output
    assert target.read_text() == "a=1\n"

    enough = _inventory(tmp_path / "enough.yaml", host.inventory_entry(), 30)
    applied = Deploy(tmp_path, enough)("apply", str(playbook), "--yes")
    assert applied.exit_code == 0, applied.output
    assert target.read_text() == "a=1\nb=2\n"
