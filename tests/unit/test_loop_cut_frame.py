"""A command frame cut short by the end of the loop's stdin never runs (`deploy.remote.loop`).

``head -c N`` returns what it got, without an error, when its input ends first: the loop's
stdin ends inside a frame when the connection is cut or the workstation killed between two
SSH packets, or when the relay feeding the loop (``$_dZ``, a ``cat`` in the background) is
killed. The cut command must not be evaluated: ``rm -rf /x/cache-tmp`` cut to ``rm -rf /x/``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deploy import hostsh


def _loop(shell: str, state: Path, stdin: bytes) -> bytes:
    script = f"_dS={state}; _dU=022; _dZ=; _dA=\n" + hostsh.text("loop.sh")
    return subprocess.run(
        [shell, "-c", script], input=stdin, capture_output=True, check=False, timeout=30
    ).stdout


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
@pytest.mark.parametrize("with_stdin", [False, True])
def test_a_command_cut_short_never_runs(shell: str, with_stdin: bool, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "data"
    victim.mkdir()
    (victim / "precious").write_text("x")
    code = f"rm -rf {victim}/cache-tmp".encode()
    stdin = b"y" * 10 if with_stdin else b""
    header = b"RUN %d %d 0\n" % (len(code), len(stdin))
    for cut in (len(f"rm -rf {victim}/"), len(code), len(code) + len(stdin)):
        frame = (header + code + stdin)[: len(header) + cut]
        out = _loop(shell, state, frame)
        assert victim.exists(), f"cut after {cut} bytes ran: {out!r}"
        assert b"DONE" not in out, out


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
def test_a_whole_frame_still_runs(shell: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    code = b"cat; printf ok"
    out = _loop(shell, state, b"RUN %d 3 0\n" % len(code) + code + b"in\nEND\n")
    assert out.endswith(b"DONE 0 5 0\nin\nok"), out
