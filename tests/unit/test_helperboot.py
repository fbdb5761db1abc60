"""The file helper's start (`deploy.hostpy.helperboot`): the helper's argv, and the exit
statuses the lock's shell acts on (`CANNOT`: start it on python3 instead; `FAILED`: never
mistaken for a start that failed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.hostpy import helperboot
from deploy.remote.hostfiles import HELPER_BOOT
from deploy.remote.hostprogram import program

#: A stand-in helper: says what argv it was given.
SOURCE = "import sys\nprint('ran', __name__, sys.argv)\n"


def _start(state_dir: Path, source: str = SOURCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", HELPER_BOOT, source, "3", "4", str(state_dir)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_helper_runs_as_if_started_with_its_source(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "ran __main__ ['-c', '3', '4']\n")
    assert list(tmp_path.iterdir()) == [], "nothing is written to state_dir"


@pytest.mark.parametrize(
    ("source", "status"),
    [
        ("def (:\n", helperboot.CANNOT),  # does not compile here: python3 gets to try
        ("raise SystemExit(1)\n", helperboot.FAILED),  # started, then failed: never 1 or 2
        ("raise RuntimeError('boom')\n", helperboot.FAILED),
    ],
)
def test_the_exit_status_says_whether_the_helper_could_start(
    tmp_path: Path, source: str, status: int
) -> None:
    assert _start(tmp_path, source).returncode == status


def test_the_real_helper_starts_through_it(tmp_path: Path) -> None:
    """The file helper itself, served one request over its pipes; nothing left in state_dir."""
    import json

    target = tmp_path / "f"
    target.write_bytes(b"hello\n")
    for _ in range(2):
        go_r, go_w = os.pipe()
        ack_r, ack_w = os.pipe()
        head = json.dumps({"op": "read", "path": str(target)}).encode()
        fds = (str(go_r), str(ack_w), str(tmp_path))
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", HELPER_BOOT, program("fileagent"), *fds],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(go_r, ack_w),
        )
        os.close(go_r)
        os.close(ack_w)
        assert proc.stdin is not None
        proc.stdin.write(head)
        proc.stdin.close()
        os.write(go_w, f"{len(head)} 0\n".encode())
        os.close(go_w)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        proc.wait(30)
        os.close(ack_r)
        assert proc.returncode == 0 and out.endswith(b"hello\n"), out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
