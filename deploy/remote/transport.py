"""The transport under `RemoteHost`: exec channels and TCP streams, whatever carries them.

The seam sits here, not at `Host`, because everything deploy does on a host is built from a
command with stdin/stdout/stderr and an exit status (the lock's shell, the session loop, the
file helper) and a TCP stream to the host's loopback (health and load checks). Faking `Host`
would take a second lock script, session framing and file helper, and fast tests of a
reimplementation prove nothing; here (where httpx's ``BaseTransport`` draws it too),
`tests.unit.local_host.LocalTransport` runs the very same programs in local processes, and
only SSH itself is left to the integration suite (`deploy.remote.connect.SshTransport`).
Failures are `OSError` (or paramiko's, inside `deploy.remote`), turned into `deploy.errors`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

#: How long a command's output may still come after its exit status (`rest_after_exit`).
AFTER_EXIT = 0.5


class Channel(Protocol):
    """A started command: the subset of ``paramiko.Channel`` that deploy uses. ``fileno()`` is
    readable whenever stdout or stderr data, or the exit status, arrived (``select`` wakes for
    all three, as on paramiko's pipe)."""

    @property
    def closed(self) -> bool: ...
    def fileno(self) -> int: ...
    def sendall(self, data: bytes | memoryview) -> None: ...
    def recv(self, nbytes: int) -> bytes: ...
    def recv_stderr(self, nbytes: int) -> bytes: ...
    def recv_ready(self) -> bool: ...
    def recv_stderr_ready(self) -> bool: ...
    def exit_status_ready(self) -> bool: ...
    def recv_exit_status(self) -> int: ...
    def shutdown_write(self) -> None: ...
    def settimeout(self, timeout: float | None) -> None: ...
    def close(self) -> None: ...


def rest_after_exit(channel: Channel, within: float = AFTER_EXIT) -> tuple[bytes, bytes]:
    """What a command still sends after its exit status arrived: (stdout, stderr), to the EOF.

    OpenSSH sends the exit status as soon as the command exits and the rest of the pipe's
    output after it ("there could be some more data waiting in the pipe", session.c); only the
    EOF comes after the last byte, so a reader stopping at the exit status can lose the end
    (`deploy status` lost its script's last line so, under load). A background process holding
    the output never lets the EOF come: after ``within`` seconds what came is all there is.
    Both streams end at the one EOF, so stderr is complete when stdout is.
    """
    out = bytearray()
    deadline = time.monotonic() + within
    try:
        while (left := deadline - time.monotonic()) > 0:
            channel.settimeout(left)
            chunk = channel.recv(1 << 16)
            if not chunk:
                break  # the EOF: nothing more will come
            out += chunk
    except TimeoutError:
        pass  # a background process holds the output open
    finally:
        channel.settimeout(None)
    err = bytearray()
    while channel.recv_stderr_ready():
        err += channel.recv_stderr(1 << 16)
    return bytes(out), bytes(err)


class Stream(Protocol):
    """A TCP byte stream to a port on the host (a forwarded channel, or a local socket)."""

    def sendall(self, data: bytes) -> Any: ...
    def recv(self, nbytes: int) -> bytes: ...
    def settimeout(self, timeout: float | None) -> None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    """One open connection to a host, used by one thread, ended by `close`: the only thing
    `RemoteHost` needs from SSH."""

    #: Who the commands run as (the SSH login user; this machine's user locally).
    user: str

    def is_active(self) -> bool:
        """Whether the connection still carries traffic (a lost one raises `HostUnreachable`)."""
        ...

    def open_exec(self, command: str, timeout: float) -> Channel:
        """Start ``command`` with the login shell, as ``ssh host command`` would.

        Raises:
            OSError: the channel could not be opened (the connection is gone, usually).
        """
        ...

    def open_stream(self, address: str, port: int, timeout: float) -> Stream:
        """Connect to ``address:port`` as seen from the host (SGLang on its loopback).

        Raises:
            ConnectionRefusedError: nothing listens there (yet).
            OSError: another failure; `is_active` tells a lost connection from it.
        """
        ...

    def open_sftp(self) -> Any:
        """A ``paramiko.SFTPClient`` (``Any``: no paramiko type leaves `deploy.remote`)."""
        ...

    def close(self) -> None: ...
