"""Which interpreter the lock's shell starts the file helper on (`deploy.remote.loop.LOOP`):
the compile check's own when it can run the helper — then the helper compiles in its place —
else python3, as before. The lock script and its loop run here in a local bash and dash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.remote.hostfiles import HELPER_BOOT, HELPER_SOURCE
from deploy.remote.lock import lock_script

PYTHON = os.path.realpath(sys.executable)


def _lookup(tmp_path: Path, preferred: str, shell: str) -> dict[str, object]:
    """Take the lock with ``preferred`` as the compile check's interpreter and send the
    helper one ``compiled`` lookup naming this interpreter; its answer."""
    state = tmp_path / "state"
    script = lock_script(str(state), "h", python=preferred, agent=HELPER_SOURCE, boot=HELPER_BOOT)
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    head = json.dumps(
        {"op": "compiled", "python": PYTHON, "path": str(target), "cache": str(tmp_path)}
    ).encode()
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
def test_the_helper_runs_on_the_compile_checks_interpreter(tmp_path: Path, shell: str) -> None:
    if os.path.realpath("/usr/bin/python3") == PYTHON:
        pytest.skip("this interpreter is python3 itself: nothing to tell apart")
    assert _lookup(tmp_path, PYTHON, shell)["here"] is True


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize("status", [1, 2])
def test_an_interpreter_that_cannot_run_it_falls_back_to_python3(
    tmp_path: Path, shell: str, status: int
) -> None:
    """Python 2 exits 2 on ``-I``; a Python too old for the helper exits 2 in its boot, one
    that cannot parse the boot exits 1: the helper then runs on python3, and serves."""
    old = tmp_path / "python2"
    old.write_text(f"#!/bin/sh\necho 'Unknown option: -I' >&2\nexit {status}\n")
    old.chmod(0o755)
    answer = _lookup(tmp_path, str(old), shell)
    assert answer["ok"] is True and answer["reused"] is False
    assert answer["here"] is (os.path.realpath("/usr/bin/python3") == PYTHON)


def test_no_interpreter_named_is_python3_as_before(tmp_path: Path) -> None:
    answer = _lookup(tmp_path, "", "bash")
    assert answer["ok"] is True
    assert answer["here"] is (os.path.realpath("/usr/bin/python3") == PYTHON)


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_a_wrapper_script_is_not_started_for_the_helper(tmp_path: Path, shell: str) -> None:
    """A pyenv shim or a ``#!`` wrapper would start an interpreter it chooses, after its own
    start-up: the helper runs on python3 without running it."""
    marker = tmp_path / "wrapper-ran"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\ntouch {marker}\nexec {PYTHON} "$@"\n')
    wrapper.chmod(0o755)
    answer = _lookup(tmp_path, str(wrapper), shell)
    assert answer["ok"] is True and not marker.exists()


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
    assert "here" in _lookup(tmp_path, PYTHON, shell)
    assert not (state / ".helper.go").exists() and not (state / ".helper.ack").is_symlink()
