"""An open of a fifo that fails (ENFILE, ENOMEM) never leaves the lock's shell blocked.

bash (not in POSIX mode: root's usual login shell) does not exit when a redirection of
``exec`` fails: it goes on to the next line. If the shell's read-write anchor of a fifo fails
to open, the next line's plain open of the same fifo waits for a partner that never comes,
with the lock held, after the client left too. Each case makes one open fail by editing the
loop's text (as tests/unit/test_relay_window.py does) and runs the lock script in bash and
dash with a carried request, the client's stdin left open.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.remote.hostfiles import HELPER_SOURCE
from deploy.remote.lock import lock_script

CASES = {
    "go anchor": ('3<>"$1"', "3<>/nonexistent/go"),
    "ack anchor": ('4<>"$2"', "4<>/nonexistent/ack"),
    "relay anchor": ('4<>"$3"', "4<>/nonexistent/relay"),
    "relay's own open": ('exec >"$3" 4<&-', "exec >/nonexistent/relay 4<&-"),
}


def _holders(path: Path) -> list[int]:
    """Processes with ``path`` open. Processes come and go while /proc is walked (on a busy
    machine, often): one that vanished is skipped, never an error (a glob over /proc/*/fd
    raised FileNotFoundError when a process exited mid-walk)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == str(path):
                    found.append(int(entry))
    return found


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/dash"])
def test_a_fifo_that_cannot_be_opened_frees_the_lock(shell: str, case: str, tmp_path: Path) -> None:
    old, new = CASES[case]
    assert hostsh.text("loop.sh").count(old) == 1
    state, read = tmp_path / "state", tmp_path / "a"
    read.write_text("a\n")
    head = json.dumps({"op": "read", "path": str(read)}).encode()
    ahead = (b"CALL %d 0 0\n" % len(head) + head).decode()
    script = lock_script(str(state), "h", ahead=ahead, agent=HELPER_SOURCE).replace(old, new)
    proc = subprocess.Popen(
        [shell, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # A blocked shell never ends; a working one ends in well under a second idle, but a
        # loaded 2-core machine can take seconds just to start the helper: wait for the
        # outcome (up to 60 s), never for a fixed time.
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = proc.poll() is not None
        assert proc.stdin is not None
        proc.stdin.close()  # the client goes away too
        # Whatever still holds the lock must let go once the client left: poll for it.
        deadline = time.monotonic() + 30
        stuck = _holders(state / "lock")
        while stuck and time.monotonic() < deadline:
            time.sleep(0.05)
            stuck = _holders(state / "lock")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.wait()
    assert not stuck, f"{case}: the lock is still held by {stuck} after the client left"
    assert ended, f"{case}: the shell was still there 60 s on, the client still connected"
