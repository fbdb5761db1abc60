"""A host that trickles bytes after its shell's exit status cannot hold a run (review finding).

`Session._fill` reads what follows the exit status (`transport.rest_after_exit`), but for
`AFTER_EXIT` seconds in all, within the call's deadline: a forged early status followed by a
byte every 0.3 s, never a newline nor the EOF, once kept a run with ``timeout=1`` reading past
its 16 s limit for ever.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from deploy.remote.calls import SessionLost
from deploy.remote.session import Session
from deploy.remote.transport import AFTER_EXIT


class Trickle:
    """An exec channel whose exit status is in and whose output never ends."""

    closed = False

    def __init__(self) -> None:
        self.status_event = threading.Event()
        self.status_event.set()
        self._r, self._w = os.pipe()
        os.write(self._w, b"x")  # always readable, as paramiko's pipe after the status

    def fileno(self) -> int:
        return self._r

    def sendall(self, data: bytes | memoryview) -> None:
        pass

    def send(self, data: bytes | memoryview) -> int:
        return len(data)

    def settimeout(self, timeout: float | None) -> None:
        pass

    def recv(self, nbytes: int) -> bytes:
        time.sleep(0.1)
        return b"D"  # no newline, no EOF

    def recv_stderr(self, nbytes: int) -> bytes:
        return b""

    def recv_ready(self) -> bool:
        return False

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return True

    def recv_exit_status(self) -> int:
        return 0

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


@pytest.mark.parametrize("timeout", [1.0, None])
def test_a_trickle_after_the_exit_status_ends_in_session_lost(timeout: float | None) -> None:
    channel = Trickle()
    began = time.monotonic()
    try:
        with pytest.raises(SessionLost, match="the host's shell ended"):
            Session(channel).run("true", timeout=timeout)
    finally:
        channel.close()
    assert time.monotonic() - began < AFTER_EXIT + 1.0
