"""Secrets are asked for with echo already off when the prompt shows (`deploy.cli.connect._ask`).

``click.prompt(hide_input=True)`` printed the prompt and only then let getpass turn echo off,
discarding what was typed meanwhile. A password typed as soon as the prompt showed, on a busy
workstation, was echoed in clear and lost, and the
command waited for it forever: seen once as ``SSH password:c0rrect-...`` on the screen of a
hung ``--ask-pass`` test. Here the child asks on a real pseudo-terminal, slowed (0.5 s) just
before echo goes off, and the parent checks the terminal's echo the moment the prompt appears.
"""

from __future__ import annotations

import fcntl
import os
import select
import sys
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-typed-at-once"

_CHILD = """
import sys, termios, time
real = termios.tcsetattr
def busy(fd, when, attributes):
    time.sleep(0.5)  # the interpreter busy elsewhere just before echo goes off
    return real(fd, when, attributes)
termios.tcsetattr = busy
import click
from deploy.cli.connect import _ask
try:
    value = _ask("SSH password")
except click.Abort:
    print("ABORTED")
    sys.exit(1)
print("GOT", len(value), value == sys.argv[1])
"""


def _read(fd: int, until: bytes, seen: bytes, timeout: float = 20.0) -> bytes:
    deadline = time.monotonic() + timeout
    while until not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    return seen


def _asking() -> tuple[int, int, int]:
    """Start the child on a new pty; return its pid, the pty's controlling and terminal side.

    The parent keeps the terminal side open: its flags (ECHO) are the ones the child's getpass
    changes, which the controlling side's own flags do not show.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    fd, terminal = os.openpty()
    pid = os.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.close(fd)
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
        for target in (0, 1, 2):
            os.dup2(terminal, target)
        os.execve(sys.executable, [sys.executable, "-c", _CHILD, SECRET], env)
    return pid, fd, terminal


def test_the_prompt_shows_only_once_echo_is_off_and_an_empty_answer_asks_again() -> None:
    pid, fd, terminal = _asking()
    try:
        assert termios.tcgetattr(terminal)[3] & termios.ECHO  # a terminal echoes by default
        seen = _read(fd, b"SSH password", b"")
        assert b"SSH password" in seen, seen
        # The moment the prompt is visible, the terminal must already hide what is typed.
        assert not termios.tcgetattr(terminal)[3] & termios.ECHO, "prompt shown with echo on"
        os.write(fd, b"\n")  # an empty answer: asked again
        seen = _read(fd, b"SSH password", seen.replace(b"SSH password", b"", 1))
        assert b"SSH password" in seen, seen
        assert not termios.tcgetattr(terminal)[3] & termios.ECHO
        os.write(fd, SECRET.encode() + b"\n")
        seen = _read(fd, b"GOT", seen)
    finally:
        _, status = os.waitpid(pid, 0)
        seen = _read(fd, b"never printed", seen, timeout=0.5)  # the rest of the child's line
        os.close(fd)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert f"GOT {len(SECRET)} True".encode() in seen, seen
    assert SECRET.encode() not in seen, seen


def test_ctrl_d_at_the_prompt_aborts_and_gives_the_terminal_its_echo_back() -> None:
    pid, fd, terminal = _asking()
    try:
        seen = _read(fd, b"SSH password", b"")
        assert b"SSH password" in seen, seen
        os.write(fd, b"\x04")  # Ctrl-D on an empty line: end of input
        seen = _read(fd, b"ABORTED", seen)
    finally:
        _, status = os.waitpid(pid, 0)
        echo_after = termios.tcgetattr(terminal)[3] & termios.ECHO
        os.close(fd)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 1, seen
    assert b"ABORTED" in seen, seen
    assert echo_after, "the terminal was left without echo"
