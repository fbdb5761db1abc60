"""A lock shell killed right after it started its relay leaves no process holding the lock.

The relay (`deploy.remote.loop.LOOP`, ``$_dZ``) opens the fifo for writing, which blocks until
the shell opens it for reading. If the shell dies in between (SIGKILL, the OOM killer), the
relay waits there forever: it must not hold the lock's descriptor (9) or the channel's output
then, or the lock is never released and the channel never closes.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from deploy.errors import DeployError
from deploy.remote import lock as lockmod
from deploy.remote.local import LocalHost


def test_a_shell_killed_before_it_opened_the_relay_frees_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = 'exec 0<"$3" 5<&-; _dZ='
    assert opened in lockmod.LOOP
    monkeypatch.setattr(lockmod, "LOOP", lockmod.LOOP.replace(opened, "sleep 0.3; kill -9 $$"))
    home, state, read = tmp_path / "home", tmp_path / "state", tmp_path / "a"
    home.mkdir(mode=0o700)
    read.write_text("a\n")
    stuck: list[str] = []
    with LocalHost("local", home=str(home)) as host:
        with pytest.raises(DeployError):
            lockmod.acquire(host, str(state), {"run_id": "t"}, prefetch=[str(read)], timeout=3)
        time.sleep(0.5)
        free = subprocess.run(["flock", "-n", str(state / "lock"), "true"]).returncode == 0
        for fd in Path("/proc").glob("[0-9]*/fd/*"):
            try:
                if fd.readlink() == state / "lock":
                    stuck.append(fd.parent.parent.name)
            except OSError:
                pass
        for pid in stuck:
            subprocess.run(["kill", "-9", pid], check=False)
    assert free, f"the lock is held by {stuck} after its shell died"
