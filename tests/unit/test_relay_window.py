"""Whatever dies while the lock shell wires its fifos, no process is left holding the lock.

The lock shell (``deploy/hostsh/loop.sh``) talks to two processes through fifos: the relay
(``$_dZ``, a ``cat`` feeding the loop) and the file helper. Opening a fifo blocks until its
other end is opened too, so a shell that opened its end first and then lost the process of
the other end (killed by the OOM killer, a redirection that failed) used to wait there forever
with the lock's descriptor (9) open: the host stayed locked until someone killed it. Each test
makes one of those processes die at that moment, by editing the loop's text, and checks that
the acquire fails within its timeout and that nothing holds the lock a moment later. (A fork
that fails needs no test of its own: bash and dash both exit then.)
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.errors import DeployError
from deploy.remote import lock as lockmod
from tests.unit.local_host import LocalHost

#: The loop's text as it is, and what each case puts in its place.
RELAY_STARTED = "exec 4<&- 5<&-; _dZ="
RELAY_OPENS = '{ exec >"$3" 4<&- || exit 1;'
HELPER_OPENS = '0<&6 3<"$1"'

CASES = {
    # the shell dies just after it started the relay: the relay must not hold the lock
    "shell killed": (RELAY_STARTED, "sleep 0.3; kill -9 $$"),
    # the relay dies before it opened its end: the shell must not wait for it
    "relay died": (RELAY_OPENS, "{ exit 1;"),
    # the helper's process never opens its end (a redirection fails): nor for the helper
    "helper died": (HELPER_OPENS, "0<&6 3</nonexistent/fifo"),
}


def _holders(path: Path) -> list[str]:
    """The pids that have ``path`` open."""
    found = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if fd.readlink() == path:
                found.append(fd.parent.parent.name)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("case", CASES)
def test_a_process_dying_at_the_fifos_frees_the_lock(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = CASES[case]
    assert old in hostsh.text("loop.sh")
    script = lockmod.lock_script
    monkeypatch.setattr(lockmod, "lock_script", lambda *a, **k: script(*a, **k).replace(old, new))
    home, state, read = tmp_path / "home", tmp_path / "state", tmp_path / "a"
    home.mkdir(mode=0o700)
    read.write_text("a\n")
    with LocalHost("local", home=str(home)) as host:
        started = time.monotonic()
        with pytest.raises(DeployError):
            lockmod.acquire(host, str(state), {"run_id": "t"}, prefetch=[str(read)], timeout=3)
        took = time.monotonic() - started
        time.sleep(0.5)
        free = subprocess.run(["flock", "-n", str(state / "lock"), "true"]).returncode == 0
        stuck = _holders(state / "lock")
        for pid in stuck:
            subprocess.run(["kill", "-9", pid], check=False)
    assert free, f"{case}: the lock is held by {stuck}"
    assert took < 2, f"{case}: the acquire took {took:.1f} s, waiting out its timeout"
