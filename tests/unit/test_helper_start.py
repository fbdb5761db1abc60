"""The lock's shell starts the file helper on python3 (``deploy/hostsh/loop.sh``), in a
local bash and dash: it serves a request, and fifos a killed session left behind do not stop
it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from deploy.remote.hostfiles import HELPER_SOURCE
from deploy.remote.lock import lock_script


def _read(tmp_path: Path, shell: str) -> dict[str, object]:
    """Take the lock and send the helper one ``read`` of a file; its answer."""
    state = tmp_path / "state"
    script = lock_script(str(state), "h", agent=HELPER_SOURCE)
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    head = json.dumps({"op": "read", "path": str(target)}).encode()
    proc = subprocess.run(
        [shell, "-c", script],
        input=b"CALL %d 0 0\n" % len(head) + head,
        capture_output=True,
        timeout=60,
        check=False,
    )
    out = proc.stdout.partition(b"\nREADY\n")[2]
    assert out.startswith(b"ANS "), (proc.stdout, proc.stderr)
    size = int(out.split()[1])
    answer: dict[str, object] = json.loads(out.partition(b"\n")[2][:size])
    return answer


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_the_helper_starts_and_serves(tmp_path: Path, shell: str) -> None:
    assert _read(tmp_path, shell)["ok"] is True


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_fifos_a_killed_session_left_behind_do_not_stop_the_helper(
    tmp_path: Path, shell: str
) -> None:
    """A session killed between creating the helper's fifos and removing them (its client
    closed the channel at that moment) leaves them in state_dir. The next session holds the
    lock, so they are nobody's: it replaces them, where it used to find no helper ("python3
    is needed on the host") on every run from then on."""
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    os.mkfifo(state / ".helper.go", 0o600)
    os.symlink("/nonexistent", state / ".helper.ack")
    assert _read(tmp_path, shell)["ok"] is True
    assert not (state / ".helper.go").exists() and not (state / ".helper.ack").is_symlink()
