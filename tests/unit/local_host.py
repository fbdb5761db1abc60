"""`LocalHost`: this machine as a host, for fast tests — the real host code without SSH.

`LocalTransport` implements `deploy.remote.transport.Transport` with local processes and
sockets: an exec is ``bash -c COMMAND`` in its own session, in the host's home directory, with
a small login-like environment; a stream is a TCP connection to a loopback port; SFTP is
OpenSSH's ``sftp-server`` run as a command (what `deploy.remote.become` does over SSH). So a
`LocalHost` runs the same lock script (state_dir trust check, flock, scan), the same session
loop and the same fd-based file helper as a real host: only SSH itself — login, host keys,
direct-tcpip, sudo — is left to the integration suite. See `deploy.remote.transport` for why
the seam sits at that level.

Files live wherever the caller puts them (tests use temporary directories): a `LocalHost` is
not a chroot, it is this machine, as the user running the tests.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

import paramiko

from deploy.remote.become import sftp_command
from deploy.remote.connect import ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.remote.transport import Channel, Stream


class LocalChannel:
    """A local process behind the ``paramiko.Channel`` calls deploy uses.

    Two reader threads move stdout and stderr into buffers, so the process never blocks on a
    full pipe; a self-pipe is readable while data or the exit status waits (``fileno``: the
    same contract as paramiko's channel pipe, so ``select`` works on it). The exit status is
    set only after both streams ended, so "exit status ready and nothing to read" means all
    output was read, as callers assume.
    """

    def __init__(self, command: str, *, cwd: str, env: Mapping[str, str]) -> None:
        self._proc = subprocess.Popen(
            ["/bin/bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
        self._out = bytearray()
        self._err = bytearray()
        self._eof = [False, False]
        self._cond = threading.Condition()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._woken = False
        self._status: int | None = None
        self._closed = False
        self._timeout: float | None = None
        self.status_event = threading.Event()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for index, (stream, buffer) in enumerate(
            ((self._proc.stdout, self._out), (self._proc.stderr, self._err))
        ):
            threading.Thread(target=self._pump, args=(stream, buffer, index), daemon=True).start()

    # -- the reader side ----------------------------------------------------------------------

    def _pump(self, stream: IO[bytes], buffer: bytearray, index: int) -> None:
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            with self._cond:
                if chunk:
                    buffer += chunk
                else:
                    self._eof[index] = True
                self._wake()
                self._cond.notify_all()
            if not chunk:
                break
        stream.close()
        with self._cond:
            if not all(self._eof):
                return
        status = self._proc.wait()
        with self._cond:
            self._status = status if status >= 0 else 128 - status
            self.status_event.set()
            self._wake()
            self._cond.notify_all()

    def _wake(self) -> None:
        if not self._woken and not self._closed:
            self._woken = True
            os.write(self._wake_w, b"x")

    def _settle_wake(self) -> None:
        """Drain the self-pipe once nothing is left to report (under the condition)."""
        if self._closed:
            return
        if self._woken and not self._out and not self._err and self._status is None:
            self._woken = False
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 64)

    # -- paramiko.Channel's calls -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int:
        return self._wake_r

    def get_name(self) -> str:
        """paramiko's `SFTPClient` logs under its channel's name."""
        return f"local-{self._proc.pid}"

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def send(self, data: bytes | memoryview) -> int:
        stdin = self._proc.stdin
        if self._closed or stdin is None or stdin.closed:
            raise OSError("the channel is closed")
        return os.write(stdin.fileno(), data)

    def sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            sent = self.send(view)
            view = view[sent:]

    def _take(self, buffer: bytearray, index: int, nbytes: int) -> bytes:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._cond:
            while not buffer and not self._eof[index] and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("timed out reading the channel")
                self._cond.wait(left)
            data = bytes(buffer[:nbytes])
            del buffer[:nbytes]
            self._settle_wake()
            return data

    def recv(self, nbytes: int) -> bytes:
        return self._take(self._out, 0, nbytes)

    def recv_stderr(self, nbytes: int) -> bytes:
        return self._take(self._err, 1, nbytes)

    def recv_ready(self) -> bool:
        with self._cond:
            return bool(self._out)

    def recv_stderr_ready(self) -> bool:
        with self._cond:
            return bool(self._err)

    def exit_status_ready(self) -> bool:
        return self.status_event.is_set()

    def recv_exit_status(self) -> int:
        self.status_event.wait()
        assert self._status is not None
        return self._status

    def shutdown_write(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def close(self) -> None:
        """Close our side; a command still running gets SIGHUP, as a dropped SSH session
        would deliver (a server started with ``setsid`` is in its own session and stays)."""
        if self._closed:
            return
        self.shutdown_write()
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGHUP)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class LocalTransport:
    """This machine as a transport: commands are local processes, streams local sockets.

    ``home``: the directory commands start in (sshd starts them in the login user's home);
    ``env``: variables added to the login-like environment every command gets.
    """

    def __init__(self, home: str | None = None, env: Mapping[str, str] | None = None) -> None:
        entry = pwd.getpwuid(os.getuid())
        self.user = entry.pw_name
        self.home = home or entry.pw_dir
        self.env = {
            "HOME": self.home,
            "USER": entry.pw_name,
            "LOGNAME": entry.pw_name,
            "SHELL": "/bin/bash",
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            **(env or {}),
        }
        self._active = True
        self._channels: list[LocalChannel] = []

    def is_active(self) -> bool:
        return self._active

    def open_exec(self, command: str, timeout: float) -> Channel:
        if not self._active:
            raise OSError("the local transport is closed")
        channel = LocalChannel(command, cwd=self.home, env=self.env)
        self._channels = [c for c in self._channels if not c.closed]
        self._channels.append(channel)
        return channel

    def open_stream(self, address: str, port: int, timeout: float) -> Stream:
        """A TCP connection to ``address:port`` on this machine's loopback (nothing else: a
        `LocalHost` must never reach the network)."""
        host = "127.0.0.1" if address in ("localhost", "0.0.0.0", "") else address
        if not ipaddress.ip_address(host).is_loopback:
            raise OSError(f"LocalTransport connects only to loopback, not {address}")
        return socket.create_connection((host, port), timeout=timeout)

    def open_sftp(self) -> Any:
        channel = self.open_exec(sftp_command(), 10)
        return paramiko.SFTPClient(channel)

    def close(self) -> None:
        self._active = False
        for channel in self._channels:
            channel.close()
        self._channels = []


class LocalHost(RemoteHost):
    """A `RemoteHost` whose transport is `LocalTransport`: this machine, no SSH.

    Everything above the transport is the real code (commands, the lock's session, the file
    helper, HTTP to a loopback port). For tests and for the engine's host factory
    (`deploy.engine.host_run.RunOptions.open_host`).
    """

    def __init__(
        self, name: str = "local", *, home: str | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(
            ConnectSettings(name=name, address="localhost"),
            connector=lambda _settings: LocalTransport(home=home, env=env),
        )
