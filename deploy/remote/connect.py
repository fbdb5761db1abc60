"""Opening one SSH connection: Fabric for ssh_config and ProxyJump, our rules for host keys.

Fabric's `Connection` accepts any host key by default (``AutoAddPolicy``). Here known_hosts is
read the way OpenSSH reads it (`deploy.remote.knownhosts`: ``@revoked``, ``@cert-authority``,
several keys per host) and every key the server offers is judged by `_KnownHostsPolicy`: an
unknown key is refused (`HostKeyUnknown`) unless the host opts into OpenSSH's ``accept-new``
behaviour, a changed key is always refused (`HostKeyMismatch`), with the fingerprint and the
command to run once the operator has checked that the change is legitimate.

What people already have in ssh_config counts: User, Port, HostName, IdentityFile and
ProxyJump (through Fabric), IdentitiesOnly and UserKnownHostsFile (here). ``ssh_config`` in the
inventory (or ``--ssh-config``) names the one file to read, as ``ssh -F`` does; without it
Fabric reads ~/.ssh/config and /etc/ssh/ssh_config.

Logging in (keys, passphrases, passwords, prompts) is `deploy.remote.sshauth`.

Every paramiko and socket error is translated here, at the edge, into our exception classes,
with one line that says the likely cause and the fix (`deploy.remote.sshfail`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import paramiko

from deploy import trace
from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable, InputError
from deploy.remote.hostkeys import fingerprint, known_hosts_name, policy_for, preferring
from deploy.remote.settings import DEFAULT_KNOWN_HOSTS, ConnectSettings
from deploy.remote.sshauth import auth_kwargs
from deploy.remote.sshfail import describe

# paramiko logs expected events ("channel open FAILED: Connection refused" while a server
# loads) as errors; our own messages say what matters. `deploy -vv` turns its logging back on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

if TYPE_CHECKING:
    from fabric import Connection

    from deploy.remote.handshake import Dial

__all__ = [
    "DEFAULT_KNOWN_HOSTS",
    "ConnectSettings",
    "Negotiated",
    "fingerprint",
    "known_hosts_name",
    "negotiate",
    "open_connection",
]


def _guard(conn: Connection, settings: ConnectSettings) -> None:
    """Give ``conn`` our host-key policy and our key-type preference for its host."""
    policy, types = policy_for(conn, settings)
    conn.client.set_missing_host_key_policy(policy)
    conn.connect_kwargs["transport_factory"] = preferring(types)


def _socket(host: str, port: int, settings: ConnectSettings) -> socket.socket:
    """The TCP connection to the host, with Nagle's algorithm off (TCP_NODELAY).

    paramiko leaves Nagle on, and its public-key authentication then waits out the peer's
    delayed ACK: ~40 ms of a ~60 ms login on loopback, on every host, every run (measured in
    docs/performance.md). OpenSSH's own client turns Nagle off for the same reason. Fabric
    takes the socket as it takes a ProxyJump channel (``sock=``); errors surface exactly as
    Fabric's own connect would raise them.
    """
    sock = socket.create_connection((host, port), timeout=settings.connect_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _connection(settings: ConnectSettings) -> Connection:
    """Fabric's `Connection` for the host (ssh_config read), not yet opened.

    Raises:
        InputError: unreadable ssh_config.
    """
    from fabric import Config, Connection

    try:
        config = Config(runtime_ssh_path=settings.ssh_config)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{settings.name}: cannot read ssh_config {settings.ssh_config}: {exc}"
        ) from exc
    return Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=config,
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=_timeouts(settings),
    )


def _timeouts(settings: ConnectSettings) -> dict[str, float]:
    return {
        "banner_timeout": settings.connect_timeout,
        "auth_timeout": settings.connect_timeout,
        "channel_timeout": settings.connect_timeout,
    }


class _EarlyTransport(paramiko.Transport):  # type: ignore[misc]  # untyped
    """A transport whose key exchange ran ahead of the login (`negotiate`).

    ``SSHClient.connect`` calls `start_client` on whatever its transport factory returns;
    here that second call is a no-op, since the negotiation already succeeded (a failed one
    is never handed over). Everything after it (the host-key policy, the login) runs as on
    a fresh transport.
    """

    negotiated = False

    def start_client(self, event: Any = None, timeout: float | None = None) -> None:
        if not self.negotiated:
            super().start_client(event, timeout)


@dataclass
class Negotiated:
    """A handshake made ahead of the login: the transport, or what went wrong.

    ``target`` is where it went (``host``, ``port`` after ssh_config). ``error`` is the
    exception the connection would have raised (refused, no answer, an untrusted host key),
    kept to be raised by `open_connection` exactly where a connection made then would have
    raised it; the transport is then already closed.
    """

    settings: ConnectSettings
    target: tuple[str, int]
    transport: _EarlyTransport | None = None
    error: BaseException | None = None

    def close(self) -> None:
        """Close the transport (idempotent, from any thread): its thread ends within 0.1 s."""
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.close()
            if transport.is_alive() and transport is not threading.current_thread():
                transport.join(1.0)


@trace.spanned("ssh.handshake")
def negotiate(
    settings: ConnectSettings,
    cancelled: threading.Event,
    hold: Callable[[Negotiated], None] = lambda early: None,
    dial: Dial | None = None,
) -> Negotiated | None:
    """TCP connect, banners, key exchange and the host-key check: everything before login.

    Writes nothing and asks nothing (an unknown key that ``accept-new`` would record is only
    recorded by `open_connection`, at the login). None when the host is not to be reached
    ahead: through a ProxyJump or ProxyCommand (that would mean logging in to the jump
    host), or settings that fail before any contact (an unreadable ssh_config or known_hosts,
    which `open_connection` then reports). ``cancelled`` (the command's input was bad, or it
    ended) stops it between steps; ``hold`` is given the handshake as soon as it exists, so
    that the command can close it from another thread while it is under way. ``dial``: the
    TCP connect started before this module was imported, used if it went where ssh_config
    says the host is.
    """
    try:
        conn = _connection(settings)
        if conn.gateway is not None:
            return None
        policy, types = policy_for(conn, settings)
    except InputError:
        return None
    early = Negotiated(settings, (conn.host, conn.port or 22))
    hold(early)
    try:
        sock = dial.take(early.target) if dial is not None else None
        if sock is None:
            sock = _socket(conn.host, conn.port or 22, settings)
        if cancelled.is_set():
            sock.close()
            return None
        transport = early.transport = preferring(types, _EarlyTransport)(sock)
        transport.banner_timeout = settings.connect_timeout
        with trace.span("ssh.key_exchange", settings.name):
            transport.start_client(timeout=int(max(1, round(settings.connect_timeout))))
            transport.negotiated = True
            policy.judge(transport.get_remote_server_key())
    except (HostKeyUnknown, HostKeyMismatch, OSError, EOFError, paramiko.SSHException) as exc:
        early.close()
        early.error = exc
    if cancelled.is_set():
        early.close()
        return None
    return early


@trace.spanned("ssh.connect")
def open_connection(settings: ConnectSettings, early: Negotiated | None = None) -> Connection:
    """Open and return a Fabric `Connection` to the host, with strict host-key checking.

    ``early``: the handshake `negotiate` made ahead for these settings; the login goes on
    over its transport (or raises its error) if it went where this connection goes, else it
    is closed and the connection is made here.

    Raises:
        HostKeyUnknown, HostKeyMismatch: the host's key is not trusted (or revoked).
        HostUnreachable: refused, timed out, DNS failure, authentication failure, a key that
            cannot be decrypted; one line each (`deploy.remote.sshfail`).
        InputError: ``password_env`` names an unset variable; unreadable ssh_config.
    """
    try:
        conn = _connection(settings)
    except InputError:
        if early is not None:
            early.close()
        raise
    auth, attempt = auth_kwargs(settings, conn)
    conn.connect_kwargs.update(auth)
    _guard(conn, settings)
    # ProxyJump hops are Connections Fabric made with AutoAddPolicy: hold them to the same
    # rules, and log in to them the same way.
    hop = conn.gateway
    while hop is not None and not isinstance(hop, str):
        hop_auth, _ = auth_kwargs(settings, hop)
        hop.connect_kwargs.update(_timeouts(settings), **hop_auth)
        _guard(hop, settings)
        hop = hop.gateway
    if early is not None and (
        conn.gateway is not None
        or early.target != (conn.host, conn.port or 22)
        or early.settings.handshake_key() != settings.handshake_key()
    ):
        early.close()
        early = None
    try:
        if early is not None:
            _take_over(conn, early)
        elif conn.gateway is None:
            conn.connect_kwargs["sock"] = _socket(conn.host, conn.port or 22, settings)
        conn.open()
    except (HostKeyUnknown, HostKeyMismatch, HostUnreachable):
        conn.close()
        raise
    except (OSError, EOFError, paramiko.SSHException) as exc:
        conn.close()
        raise HostUnreachable(describe(exc, attempt)) from exc
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return conn


def _take_over(conn: Connection, early: Negotiated) -> None:
    """Make ``conn.open()`` go on from ``early``'s handshake: its transport, or its error.

    The policy `_guard` installed judges the key again (the file may have changed since; it
    is parsed once per version) and records an accepted new one: the only write, at login.
    A transport the server has dropped meanwhile (sshd's LoginGraceTime, 2 minutes, while a
    prompt waited) is replaced by a fresh connection.
    """
    if early.error is not None:
        raise early.error
    transport = early.transport
    if transport is None or not transport.is_active():
        early.close()
        conn.connect_kwargs["sock"] = _socket(conn.host, conn.port or 22, early.settings)
        return
    conn.connect_kwargs["sock"] = transport.sock
    conn.connect_kwargs["transport_factory"] = lambda sock, **kwargs: transport
