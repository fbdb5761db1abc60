"""Run ``deploy`` on a pseudo-terminal and answer its prompts, as a person at a terminal would.

Prompts for secrets read the controlling terminal (getpass), so stdin redirection cannot answer
them; `on_terminal` forks with a pty as the child's controlling terminal, waits for each
prompt text and types the answer.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path


def on_terminal(
    args: list[str], cwd: Path, env: dict[str, str], answers: list[tuple[str, str]],
    timeout: float = 120,
) -> tuple[int, str]:  # fmt: skip
    """Run ``deploy ARGS``; for each (prompt, answer), wait for the prompt and type the answer.

    Returns (exit code, everything the terminal showed).
    """
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes deploy, with the pty as its terminal
        # As a shell starts a foreground job: Ctrl-C's SIGINT at its default, whatever this
        # test process ignores (an ignored SIGINT survives exec: the ^C was lost and the
        # newline after it answered a prompt "no", exit 0 instead of 130, in CI).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "deploy.cli", *args], env)
    seen = b""
    pending = list(answers)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pending and pending[0][0].encode() in seen:
            prompt, answer = pending.pop(0)
            seen = seen.replace(prompt.encode(), b"<" + prompt.encode() + b">", 1)
            os.write(fd, answer.encode() + b"\n")
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode("utf-8", "replace")
