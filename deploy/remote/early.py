"""The half of a connection made ahead of the login: `negotiate`, run by
`deploy.remote.handshake` in a background thread while the command validates its input.

Everything before authentication, and nothing after: the TCP connect (or the one `Dial`
made before paramiko was imported), the banners, the key exchange, the host-key check
against known_hosts (read only: recording an accepted new key is the login's), and the
``ssh-userauth`` service request (sshd answers it before any credential is sent; it logs
nothing). `deploy.remote.connect.open_connection` then logs in over the transport — or
raises what the handshake found, in the words a connection made then would have used.

paramiko knows nothing of handshakes made ahead; three small subclasses adapt it, each
overriding one method: `_EarlyTransport` (its second ``start_client`` is a no-op, and the
login's service request is answered by the one made ahead), `_SentBanner` (the client's
banner is not sent twice), `_ServiceAhead` (the service accepted ahead is held for the login).

Those methods are paramiko's private ones, and ``paramiko>=3.4`` lets a user install any later
release: one that renamed or reshaped them could leave a login waiting for an accept nobody
dispatches, then failing, on every run. So the shortcut is taken only with a paramiko it was
tested with (`TESTED_MAJORS`) that still has every method it overrides (`fits`); with any
other, `negotiate` declines and each host is connected to at the login, as without a
handshake ahead: slower by the key exchange's round trips, never broken. A new major release
then fails this project's CI (tests/integration/test_handshake_ahead.py expects the
shortcut), which is where the adapters get checked again, not an operator's run.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paramiko
from paramiko.auth_handler import AuthHandler
from paramiko.common import MSG_SERVICE_ACCEPT, cMSG_SERVICE_REQUEST

from deploy import trace
from deploy.errors import HostKeyMismatch, HostKeyUnknown, InputError
from deploy.remote.dial import BANNER, Dial
from deploy.remote.fabricconn import fabric_connection, tcp_socket
from deploy.remote.hostkeys import (
    KnownHostsPolicy,
    known_hosts_name,
    known_key_types,
    policy_for,
    preferring,
)
from deploy.remote.quickack import QuickAckTransport
from deploy.remote.settings import ConnectSettings

#: paramiko's major versions whose internals the adapters below were checked against.
TESTED_MAJORS = frozenset({3, 4, 5})

#: The private members the adapters override or call: (class, name, what it must be).
_OVERRIDDEN = (
    (paramiko.Transport, "_send_message", "method"),
    (paramiko.Transport, "start_client", "method"),
    (paramiko.Packetizer, "write_all", "method"),
    (AuthHandler, "_request_auth", "method"),
    (AuthHandler, "_parse_service_accept", "method"),
    (AuthHandler, "_client_handler_table", "property"),
    (AuthHandler, "_handler_table", "property"),
)


def fits(version: str, members: tuple[tuple[type, str, str], ...] = _OVERRIDDEN) -> bool:
    """Whether a handshake ahead may use this paramiko: a tested major ``version`` that still
    has every member the adapters rely on, in the same shape (a method, a property)."""
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) not in TESTED_MAJORS:
        return False
    for owner, name, kind in members:
        found = inspect.getattr_static(owner, name, None)
        if kind == "property" and not isinstance(found, property):
            return False
        if kind == "method" and not inspect.isfunction(found):
            return False
    return True


#: Decided once, at import (`negotiate` declines when False).
FITS = fits(getattr(paramiko, "__version__", ""))


def _service_request() -> bytes:
    message = paramiko.Message()
    message.add_byte(cMSG_SERVICE_REQUEST)
    message.add_string("ssh-userauth")
    return bytes(message.asbytes())


class _EarlyTransport(QuickAckTransport):
    """A transport whose key exchange ran ahead of the login (`negotiate`).

    ``SSHClient.connect`` calls `start_client` on whatever its transport factory returns;
    here that second call is a no-op, since the negotiation already succeeded (a failed one
    is never handed over). Everything after it (the host-key policy, the login) runs as on
    a fresh transport.
    """

    negotiated = False
    #: The ``ssh-userauth`` service was accepted ahead (`_ServiceAhead`): the login's own
    #: request is answered with it instead of being sent.
    service_accepted = False

    def start_client(self, event: Any = None, timeout: float | None = None) -> None:
        if not self.negotiated:
            super().start_client(event, timeout)

    def _send_message(self, data: Any) -> None:
        if self.service_accepted and data.asbytes() == _service_request():
            self.service_accepted = False  # once: a second attempt (another key) asks again
            accepted = paramiko.Message()
            accepted.add_string("ssh-userauth")
            accepted.rewind()
            self.auth_handler._parse_service_accept(accepted)  # sends the userauth request
            return
        super()._send_message(data)


class _ServiceAhead(AuthHandler):  # type: ignore[misc]  # untyped
    """The auth handler of a handshake: it requests the ``ssh-userauth`` service and, when
    sshd accepts, only says so (no credential is sent: the login's handler does that)."""

    def __init__(self, transport: _EarlyTransport) -> None:
        super().__init__(transport)
        self.accepted = threading.Event()

    def request(self) -> None:
        self._request_auth()

    def _parse_service_accept(self, m: Any) -> None:
        if m.get_text() == "ssh-userauth":
            self.transport.service_accepted = True
        self.accepted.set()

    @property
    def _client_handler_table(self) -> dict[int, Callable[..., None]]:
        return {MSG_SERVICE_ACCEPT: self._parse_service_accept}


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


def negotiate(
    settings: ConnectSettings,
    cancelled: threading.Event,
    hold: Callable[[Negotiated], None] = lambda early: None,
    dial: Dial | None = None,
) -> Negotiated | None:
    """TCP connect, banners, key exchange, host-key check and the ``ssh-userauth`` service
    request: everything before the login.

    Writes nothing and asks nothing (an unknown key that ``accept-new`` would record is only
    recorded by `open_connection`, at the login). None when the host is not to be reached
    ahead: with a paramiko the adapters do not fit (`FITS`), through a ProxyJump or
    ProxyCommand (that would mean logging in to the jump host), or settings that fail before any contact (an unreadable ssh_config or known_hosts,
    which `open_connection` then reports). ``cancelled`` (the command's input was bad, or it
    ended) stops it between steps; ``hold`` is given the handshake as soon as it exists, so
    that the command can close it from another thread while it is under way. ``dial``: the
    TCP connect started before this module was imported, used if it went where ssh_config
    says the host is.
    """
    if not FITS:
        return None  # an untested paramiko: the login connects as without a handshake
    direct = dial is not None and settings.known_hosts is not None
    try:
        if direct:
            # No ssh_config can reroute the host (`deploy.remote.handshake.direct`) and the
            # inventory names its known_hosts: Fabric (~30 ms to import) waits for the login.
            assert dial is not None
            target = dial.target
            name = known_hosts_name(*target)
            policy = KnownHostsPolicy(settings, [settings.known_hosts_path()], name)
            types = known_key_types(settings, policy.files, name)
        else:
            conn = fabric_connection(settings)
            if conn.gateway is not None:
                return None
            target = (conn.host, conn.port or 22)
            policy, types = policy_for(conn, settings)
    except InputError:
        return None
    early = Negotiated(settings, target)
    hold(early)
    try:
        sock = dial.take(target) if dial is not None else None
        banner = sock is not None
        if sock is None:
            sock = tcp_socket(*target, settings)
        if cancelled.is_set():
            sock.close()
            return None
        transport = early.transport = preferring(
            types, _EarlyTransport, compress=settings.compression
        )(sock, packetizer_class=_SentBanner)
        if banner:
            transport.local_version = BANNER  # hashed by the key exchange: what was sent
            transport.packetizer.sent = f"{BANNER}\r\n".encode("ascii")
        transport.banner_timeout = settings.connect_timeout
        began = dial.began if banner and dial is not None else time.perf_counter()
        try:
            transport.start_client(timeout=int(max(1, round(settings.connect_timeout))))
            transport.negotiated = True
            policy.judge(transport.get_remote_server_key())
        finally:
            trace.record("ssh.key_exchange", settings.name, began)
    except (HostKeyUnknown, HostKeyMismatch, OSError, EOFError, paramiko.SSHException) as exc:
        early.close()
        early.error = exc
        return None if cancelled.is_set() else early
    if not cancelled.is_set():
        _request_service(early, settings.connect_timeout)
    if cancelled.is_set():
        early.close()
        return None
    return early


def _request_service(early: Negotiated, timeout: float) -> None:
    """Ask for the ``ssh-userauth`` service and wait for sshd's accept (one round trip).

    A server that answers nothing within ``timeout`` while the connection stays up is taken
    at its word: the handshake keeps paramiko's authentication timeout as its error, which a
    login over a fresh connection would have met after the same wait (sshd's first answer
    after the key exchange is this one); connecting afresh would wait a second time. Anything
    else but a prompt accept drops the transport: the login then connects afresh and meets
    whatever went wrong itself, in its usual words.
    """
    transport = early.transport
    if transport is None:
        return
    handler = _ServiceAhead(transport)
    transport.auth_handler = handler
    silent = False
    try:
        with trace.span("ssh.service_request", early.settings.name):
            handler.request()
            deadline = time.monotonic() + timeout
            while not handler.accepted.wait(0.1):
                if not transport.is_active():
                    break
                if time.monotonic() > deadline:
                    silent = True
                    break
    except (OSError, EOFError, paramiko.SSHException):
        pass
    if not transport.service_accepted:
        early.close()
        if silent:
            early.error = paramiko.AuthenticationException("Authentication timeout.")


class _SentBanner(paramiko.Packetizer):  # type: ignore[misc]  # untyped
    """paramiko's packetizer, minus the client banner `Dial` already sent with the connect."""

    sent: bytes | None = None

    def write_all(self, out: bytes) -> None:
        if self.sent is not None and out == self.sent:
            self.sent = None
            return
        super().write_all(out)
