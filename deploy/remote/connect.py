"""Opening one SSH connection: Fabric for ssh_config and ProxyJump, our rules for host keys.

Fabric's `Connection` accepts any host key by default (``AutoAddPolicy``). Here known_hosts is
read the way OpenSSH reads it (`deploy.remote.knownhosts`: ``@revoked``, ``@cert-authority``,
several keys per host) and every key the server offers is judged by `KnownHostsPolicy`: an
unknown key is refused (`HostKeyUnknown`) unless the host opts into OpenSSH's ``accept-new``
behaviour, a changed key is always refused (`HostKeyMismatch`), with the fingerprint and the
command to run once the operator has checked that the change is legitimate.

The part before the login is made ahead. As soon as a command knows which hosts it will
contact (its inventory is loaded and validated, the playbook's ``hosts:`` and ``--limit``
applied), each host's TCP connect, SSH banners, key exchange, host-key check and
``ssh-userauth`` service request start in the background (`deploy.remote.handshake`,
`deploy.remote.early`), while the command goes on validating the playbook, variables and
options. The login, every command, any write (a new key recorded under
``--accept-new-host-keys`` included) and any prompt (a key's passphrase) wait until the whole
input is valid, exactly as before; what the handshake found (an unknown or changed key, a
refused port) is reported only then, in the same words and with the same exit code. So a
command with bad input exits 2 having made, with each selected host, at most a TCP connection
and a key exchange, ended before authentication (sshd logs it closed or reset
"[preauth]"): no login, nothing run, nothing written. Not negotiated ahead: hosts reached
through a ProxyJump or ProxyCommand (that would mean logging in to the jump host), hosts
whose connection settings are templated (a playbook variable or ``-e`` could still change
them), hosts whose configuration runs something when read (an ssh_config ``Match exec``, a
Fabric config file), and commands that contact no host (``--list-hosts``, ``--list-tasks``, ``deploy
validate``).

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
from typing import TYPE_CHECKING

import paramiko

from deploy import trace
from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable
from deploy.remote.fabricconn import fabric_connection, tcp_socket, timeouts
from deploy.remote.hostkeys import fingerprint, known_hosts_name, policy_for, preferring
from deploy.remote.settings import DEFAULT_KNOWN_HOSTS, ConnectSettings
from deploy.remote.sshauth import auth_kwargs
from deploy.remote.sshfail import Attempt, describe

# paramiko logs expected events ("channel open FAILED: Connection refused" while a server
# loads) as errors; our own messages say what matters. `deploy -vv` turns its logging back on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

if TYPE_CHECKING:
    from fabric import Connection

    from deploy.remote.early import Negotiated

__all__ = [
    "DEFAULT_KNOWN_HOSTS",
    "ConnectSettings",
    "fingerprint",
    "known_hosts_name",
    "open_connection",
]


def _guard(conn: Connection, settings: ConnectSettings) -> None:
    """Give ``conn`` our host-key policy, our key-type preference for its host and the
    host's compression setting (``compress``: paramiko applies it after the factory)."""
    policy, types = policy_for(conn, settings)
    conn.client.set_missing_host_key_policy(policy)
    conn.connect_kwargs["transport_factory"] = preferring(types, compress=settings.compression)
    conn.connect_kwargs["compress"] = settings.compression


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
        conn, attempt = _prepared(settings)
    except BaseException:  # an unset password_env, a key's passphrase not given...
        if early is not None:
            early.close()
        raise
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
            conn.connect_kwargs["sock"] = tcp_socket(conn.host, conn.port or 22, settings)
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


def _prepared(settings: ConnectSettings) -> tuple[Connection, Attempt]:
    """The host's Fabric `Connection` with our login arguments and host-key rules, its hops
    too; not opened. Loads the keys (a passphrase may be asked for here)."""
    conn = fabric_connection(settings)
    auth, attempt = auth_kwargs(settings, conn)
    conn.connect_kwargs.update(auth)
    _guard(conn, settings)
    # ProxyJump hops are Connections Fabric made with AutoAddPolicy: hold them to the same
    # rules, and log in to them the same way.
    hop = conn.gateway
    while hop is not None and not isinstance(hop, str):
        hop_auth, _ = auth_kwargs(settings, hop)
        hop.connect_kwargs.update(timeouts(settings), **hop_auth)
        _guard(hop, settings)
        hop = hop.gateway
    return conn, attempt


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
        conn.connect_kwargs["sock"] = tcp_socket(conn.host, conn.port or 22, early.settings)
        return
    conn.connect_kwargs["sock"] = transport.sock
    conn.connect_kwargs["transport_factory"] = lambda sock, **kwargs: transport
