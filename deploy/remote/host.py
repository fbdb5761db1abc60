"""`RemoteHost`, the `deploy.remote.api.Host` of a run: one connection, commands, the lock's door.

``open()`` (or ``with``) makes the run's one connection, a `deploy.remote.transport.Transport`
from a *connector* (by default `deploy.remote.connect.SshTransport`). Every method raises our exceptions
(`HostUnreachable` for a lost connection), never paramiko's. While the lock is held, commands go
to its shell (`deploy.remote.session`); the file operations are `deploy.remote.hostfiles`'.
"""

from __future__ import annotations

import contextlib
import logging
import select
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import paramiko

from deploy import trace
from deploy.errors import CommandResult, HostUnreachable, RemoteCommandFailed
from deploy.remote.become import Become, handshake, sftp_command
from deploy.remote.calls import Call, CallFailed, NoHelper, SessionLost
from deploy.remote.connect import SshTransport
from deploy.remote.hostfiles import HostFiles
from deploy.remote.session import Session
from deploy.remote.settings import ConnectSettings
from deploy.remote.sshauth import secret_of
from deploy.remote.transport import Channel, Transport, rest_after_exit

log = logging.getLogger("deploy.remote")

if TYPE_CHECKING:
    from deploy.remote.http import HttpResponse

#: How a host's connection is opened: settings in, an open transport out.
Connector = Callable[[ConnectSettings], Transport]


class RemoteHost(HostFiles):
    """One host, one connection, for one run. Not thread-safe: one thread per host."""

    def __init__(self, settings: ConnectSettings, connector: Connector | None = None) -> None:
        self.settings = settings
        self.name = settings.name
        self._connector = connector or SshTransport
        self._conn: Transport | None = None
        self._sftp: Any = None  # a paramiko.SFTPClient, opened on first use
        self.session: Session | None = None
        self.ops: dict[str, int] = {"exec": 0, "cmd": 0, "sftp": 0, "call": 0, "wait": 0}
        self.become: Become | None = None  # set by `open` under become
        self.prefetched, self.speculated = {}, {}

    def open(self) -> RemoteHost:
        if self._conn is None:
            settings = self.settings
            password = secret_of(settings, "become")  # unset: refused before connecting
            self._conn = self._connector(settings)
            if settings.become:
                self.become = Become(settings.name, self.login_user, settings.become_user, password)
        return self

    @property
    def login_user(self) -> str:
        """The user the SSH session logged in as (inventory, -u, ssh_config, or local)."""
        return str(self._conn.user) if self._conn is not None else (self.settings.user or "?")

    @property
    def acting_user(self) -> str:
        return self.become.user if self.become is not None else self.login_user

    @trace.spanned("host.close")
    def close(self) -> None:
        for handle in (self._sftp, self._conn):  # SFTP's channel first, then the connection
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.close()
        self._sftp = self._conn = None

    def __enter__(self) -> RemoteHost:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transport(self) -> Transport:
        if self._conn is None:
            raise RuntimeError("RemoteHost used before open()")
        if not self._conn.is_active():
            raise HostUnreachable(f"{self.name}: the SSH connection was lost")
        return self._conn

    @property
    def sftp(self) -> Any:
        """SFTP, opened on first use; under become through sudo (`deploy.remote.become`)."""
        if self._sftp is None:
            try:
                if self.become is not None:
                    self._sftp = paramiko.SFTPClient(self.start(sftp_command()))
                else:
                    self._sftp = self.transport.open_sftp()
            except (paramiko.SSHException, OSError, EOFError) as exc:  # a refused subsystem too
                raise HostUnreachable(f"{self.name}: cannot open SFTP: {exc}") from exc
        return self._sftp

    def lost(self, exc: BaseException, doing: str) -> HostUnreachable:
        return HostUnreachable(
            f"{self.name}: connection lost while {doing}: {exc or type(exc).__name__}"
        )

    def connected(self) -> bool:
        """Whether the connection is still up (tells a full disk from a lost host)."""
        return self._conn is not None and self._conn.is_active()

    def start(self, command: str, stderr: list[bytes] | None = None) -> Channel:
        """`Host.start`; under become through sudo, returning once sudo started it
        (`deploy.remote.become.handshake`: `BecomeFailed` when sudo refused), what the command
        already wrote on stderr appended to ``stderr``."""
        self.ops["exec"] += 1
        log.debug("%s: $ %.400s", self.name, command)
        line, marker, nonce = command, "", ""
        if self.become is not None:
            line, marker, nonce = self.become.wrap(command)
        try:
            channel = self.transport.open_exec(line, self.settings.connect_timeout)
            if self.become is not None:
                said = handshake(channel, self.become, marker, nonce, self.settings.connect_timeout)
                if stderr is not None:
                    stderr.append(said)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self.lost(exc, f"starting {command[:60]!r}") from exc
        return channel

    @trace.spanned("host.run", lambda self, command, **_: command)
    def run(
        self,
        command: str,
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run a shell command (already quoted by the caller) and collect its output: in the
        lock's shell while it is held, else on a new exec channel, with the same environment
        and umask either way. On timeout the result says ``timed_out``: in the lock's shell
        ``timeout(1)`` stops the command on the host; on an exec only the channel is closed, so
        callers that need the process itself killed wrap the command in ``timeout(1)``.

        Raises:
            RemoteCommandFailed: ``check`` is true and the command failed or timed out.
            HostUnreachable: the connection dropped.
        """
        began = time.monotonic()
        if self.session is not None:
            log.debug("%s: $ %.400s", self.name, command)  # a long one cut to 400 characters
            self.ops["cmd"] += 1
            try:
                run = self.session.run(command, stdin=stdin or b"", timeout=timeout)
            except (CallFailed, NoHelper, SessionLost) as exc:
                # CallFailed: a write sent earlier failed; the command was not run.
                raise self._helper_error("running", command[:60], exc) from exc
            status, out, err, timed_out = run
        else:
            status, out, err, timed_out = self.exec_collect(command, stdin, timeout)
        result = CommandResult(
            command=command,
            exit_status=-1 if timed_out else status,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            duration=time.monotonic() - began,
            timed_out=timed_out,
        )
        if check and not result.ok:
            why = f"timed out after {timeout:g} s" if timed_out else f"exited {status}"
            raise RemoteCommandFailed(
                f"{self.name}: `{command[:80]}` {why}: {result.tail(3)}", result
            )
        return result

    @trace.spanned("host.check", lambda self, command, **_: command)
    def send_check(self, command: str, *, timeout: float) -> Call | None:
        """See `deploy.remote.api.Host.send_check`."""
        if self.session is None:
            return None
        log.debug("%s: $ (check) %.400s", self.name, command)
        try:
            return self.session.send_run(command, timeout=timeout, check=True)
        except SessionLost as exc:
            raise self.lost(exc, f"sending {command[:60]!r}") from exc

    def exec_collect(
        self, command: str, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes, bool]:
        """Run ``command`` on a new exec channel, whatever the lock: (status, out, err,
        timed out). `run` without the lock, and what must not go to its shell (`read_ahead`)."""
        began = time.monotonic()
        out: list[bytes] = []
        err: list[bytes] = []
        channel = self.start(command, err)
        self.ops["wait"] += 1
        timed_out = False
        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            deadline = None if timeout is None else began + timeout
            while True:
                while channel.recv_ready():
                    out.append(channel.recv(65536))
                while channel.recv_stderr_ready():
                    err.append(channel.recv_stderr(65536))
                if channel.exit_status_ready():  # the rest follows, to the one EOF
                    rest, rest_err = rest_after_exit(channel)
                    out.append(rest)
                    err.append(rest_err)
                    break
                if channel.closed and not channel.exit_status_ready():
                    raise HostUnreachable(
                        f"{self.name}: the connection closed during {command[:60]!r}"
                    )
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if wait <= 0:
                    timed_out = True
                    break
                select.select([channel], [], [], wait)
            status = -1 if timed_out else channel.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise self.lost(exc, f"running {command[:60]!r}") from exc
        finally:
            channel.close()
        return status, b"".join(out), b"".join(err), timed_out

    def http(self, *args: Any, **kwargs: Any) -> HttpResponse:
        """`deploy.remote.http.request` over this host's connection."""
        from deploy.remote import http  # not loaded by a run without services

        return http.request(self.transport, *args, **kwargs)


def quote(value: str) -> str:
    """Quote one argument for the remote POSIX shell (every remote argument goes through here)."""
    return shlex.quote(value)
