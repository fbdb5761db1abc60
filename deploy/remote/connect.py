"""One SSH connection: Fabric for ssh_config and ProxyJump, our rules for host keys.

Fabric's `Connection` accepts any host key by default (``AutoAddPolicy``). Here known_hosts is
read the way OpenSSH reads it (`deploy.remote.hostkeys`: ``@revoked``, ``@cert-authority``,
several keys per host) and every key the server offers is judged by `KnownHostsPolicy`: an
unknown key is refused (`HostKeyUnknown`) unless the host opts into OpenSSH's ``accept-new``
behaviour, a changed key is always refused (`HostKeyMismatch`), with the fingerprint and the
command to run once the operator has checked that the change is legitimate.

What people already have in ssh_config counts: User, Port, HostName, IdentityFile and
ProxyJump (through Fabric), IdentitiesOnly and UserKnownHostsFile (here). ``ssh_config`` in the
inventory (or ``--ssh-config``) names the one file to read, as ``ssh -F`` does; without it
Fabric reads ~/.ssh/config and /etc/ssh/ssh_config.

``deploy apply`` dials its first hosts (TCP connect and client banner) once the whole input is
valid and the workstation's lock is held, while it loads the SSH stack (`deploy.remote.dial`);
the login then continues on that socket. Nothing is dialed ahead for a host with
``connect_ahead: false``, nor when an ssh_config file or Fabric's own configuration could send
a login elsewhere (HostName, Port, ProxyJump, ProxyCommand, Match, CanonicalizeHostname;
``port``, ``gateway``, ``ssh_config_path``): each login then connects itself, as it can.

Logging in, and the one line that says each failure, are `deploy.remote.sshauth`'s. The open
connection is an `SshTransport` (`deploy.remote.transport`) over a `Wire`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

import paramiko

from deploy import ablation, trace
from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable, InputError
from deploy.remote import dial
from deploy.remote.hostkeys import policy_for
from deploy.remote.settings import ConnectSettings
from deploy.remote.sshauth import Attempt, auth_kwargs, describe
from deploy.remote.transport import Channel, Stream

# paramiko logs expected events ("channel open FAILED: Connection refused" while a server
# loads) as errors; our own messages say what matters. `deploy -vv` turns its logging back on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

if TYPE_CHECKING:
    from fabric import Connection


#: What a transport offers when compression is on: delayed zlib, else none.
DELAYED = ("zlib@openssh.com", "none")
OFF = ("none",)
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def ack_now(sock: Any) -> None:
    """Send the ACK the kernel is holding back for what ``sock`` received, now (best effort)."""
    if _QUICKACK is None or not isinstance(sock, socket.socket) or ablation.off("quickack"):
        return
    # Not TCP (a socketpair in tests), or closed meanwhile: nothing to flush.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


class Wire(paramiko.Transport):  # type: ignore[misc]  # untyped
    """The paramiko transport under every connection: it offers only delayed zlib (or nothing) and
    acknowledges every global request the server sends at once.

    **Compression after login** (``zlib@openssh.com``): fewer bytes, so fewer round trips. The
    lock's command line carries the host programs (~36 KB), and a fresh TCP connection has ~14 KB
    in flight in its first round trip (`bench/window.py`): zlib brings the lock's exec to ~11.5 KB
    for ~1 ms of CPU per 100 KB. Only the delayed method is offered (as OpenSSH since 7.4): nothing an unauthenticated peer sends is decompressed; the inventory's
    ``compression: false`` offers none. Security (issue 17): paramiko compresses each packet on
    its own (``Z_FULL_FLUSH``), so a length can only reveal how that packet compresses — a
    CRIME-style risk only for a file mixing a secret with text someone else controls (then
    ``compression: false``); the sudo password travels in a packet of its own. A compromised
    host's packet may inflate ~1000-fold, but it can already send unbounded data in a channel.

    **TCP_QUICKACK after sshd's notice.** Right after a login, sshd sends the
    ``hostkeys-00@openssh.com`` global request, which asks for no reply, and keeps Nagle on for a
    session without a tty: the confirmation of the channel the client opened meanwhile waits until
    that notice is acknowledged, and the client's kernel, with nothing to send, delays its ACK by
    40 ms (tcpdump, loopback). Flushing the pending ACK (``TCP_QUICKACK``, Linux; elsewhere nothing changes) once the notice
    is read lets the confirmation go at once. A ProxyJump channel has no socket of its own.
    """

    def use_compression(self, compress: bool = True) -> None:
        # paramiko's own offers pre-authentication ``zlib`` as well, and
        # ``SSHClient.connect`` calls this after the transport factory (``compress=``), so
        # the choice is made here, where that call cannot undo it.
        on = compress and not ablation.off("compression")
        self.get_security_options().compression = DELAYED if on else OFF

    def _parse_global_request(self, m: Any) -> None:
        super()._parse_global_request(m)
        ack_now(self.sock)


def _guard(conn: Connection, settings: ConnectSettings) -> None:
    """Give ``conn`` our host-key policy and a `Wire` that offers the host's listed key types
    first, as OpenSSH does: paramiko prefers only the type of the first key it was given for the
    host, and we give it none (`deploy.remote.hostkeys.KnownHostsPolicy` judges every key)."""
    policy, types = policy_for(conn, settings)
    conn.client.set_missing_host_key_policy(policy)
    wanted: list[str] = []
    for key_type in types:
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if key_type == "ssh-rsa" else [key_type]

    def factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
        transport = Wire(sock, **kwargs)
        # A banner sent with the connect (deploy.remote.dial) is the one the key exchange hashes.
        transport.local_version = getattr(sock, "banner", transport.local_version)
        options = transport.get_security_options()
        supported = list(options.key_types)
        first = [t for t in wanted if t in supported]
        options.key_types = first + [t for t in supported if t not in first]
        return transport

    conn.connect_kwargs["transport_factory"] = factory
    conn.connect_kwargs["compress"] = settings.compression


@trace.spanned("ssh.connect")
def open_connection(settings: ConnectSettings) -> Connection:
    """Open a Fabric `Connection` to the host, with strict host-key checking.

    Raises:
        HostKeyUnknown, HostKeyMismatch: the host's key is not trusted (or revoked).
        HostUnreachable: refused, timed out, DNS failure, authentication failure, a key that
            cannot be decrypted; one line each (`deploy.remote.sshauth.describe`).
        InputError: ``password_env`` names an unset variable; unreadable ssh_config.
    """
    try:
        conn, attempt = _prepared(settings)
    except BaseException:  # no login will take a socket dialed ahead for this host
        dial.discard((settings.address, settings.port or 22))
        raise
    try:
        if conn.gateway is None:
            target = (conn.host, conn.port or 22)
            sock = dial.take(*target) or dial.tcp_socket(*target, settings.connect_timeout)
            conn.connect_kwargs["sock"] = sock
        conn.open()
    except (HostKeyUnknown, HostKeyMismatch, HostUnreachable):
        conn.close()
        raise
    except (OSError, EOFError, paramiko.SSHException) as exc:
        conn.close()
        raise HostUnreachable(describe(exc, attempt)) from exc
    conn.client.get_transport().set_keepalive(15)  # opened: it has one
    return conn


def _prepared(settings: ConnectSettings) -> tuple[Connection, Attempt]:
    """The host's Fabric `Connection` (ssh_config read) with our login arguments and host-key
    rules, its hops too; not opened. Loads the keys (a passphrase may be asked for here).

    Raises:
        InputError: unreadable ssh_config.
    """
    from fabric import Config, Connection

    timeouts = ("banner_timeout", "auth_timeout", "channel_timeout")
    limits = dict.fromkeys(timeouts, settings.connect_timeout)
    try:
        config = Config(runtime_ssh_path=settings.ssh_config)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{settings.name}: cannot read ssh_config {settings.ssh_config}: {exc}"
        ) from exc
    conn = Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=config,
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=dict(limits),
    )
    auth, attempt = auth_kwargs(settings, conn)
    conn.connect_kwargs.update(auth)
    _guard(conn, settings)
    # ProxyJump hops are Connections Fabric made with AutoAddPolicy: hold them to the same
    # rules, and log in to them the same way.
    hop = conn.gateway
    while hop is not None and not isinstance(hop, str):
        hop_auth, _ = auth_kwargs(settings, hop)
        hop.connect_kwargs.update(limits, **hop_auth)
        _guard(hop, settings)
        hop = hop.gateway
    return conn, attempt


class SshTransport:
    """One open Fabric `Connection`; `close` ends it (and every channel on it)."""

    def __init__(self, settings: ConnectSettings) -> None:
        """Open the connection (see `open_connection` for what it raises)."""
        self._conn = open_connection(settings)
        self.user = str(self._conn.user)

    def _transport(self) -> Any:
        transport = self._conn.client.get_transport()
        if transport is None:
            raise OSError("the SSH connection is closed")
        return transport

    def is_active(self) -> bool:
        transport = self._conn.client.get_transport()
        return transport is not None and bool(transport.is_active())

    def open_exec(self, command: str, timeout: float) -> Channel:
        try:
            channel = self._transport().open_session(timeout=timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        return channel  # type: ignore[no-any-return]  # a paramiko.Channel

    def open_stream(self, address: str, port: int, timeout: float) -> Stream:
        try:
            channel = self._transport().open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            raise ConnectionRefusedError(exc.text or "connect failed") from exc
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        return channel  # type: ignore[no-any-return]  # a paramiko.Channel

    def open_sftp(self) -> Any:
        return paramiko.SFTPClient.from_transport(self._transport())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()
