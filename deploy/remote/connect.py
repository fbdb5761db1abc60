"""Opening one SSH connection: Fabric for ssh_config and ProxyJump, our rules for host keys.

Fabric's `Connection` accepts any host key by default (``AutoAddPolicy``). Here the inventory's
known_hosts file is loaded and an unknown key is refused (`HostKeyUnknown`) unless the host opts
into OpenSSH's ``accept-new`` behaviour, in which case the key is recorded in that file. A key
that differs from the recorded one is always refused (`HostKeyMismatch`), with the fingerprint
and the command to run once the operator has checked that the change is legitimate.

Every paramiko and socket error is translated here, at the edge, into our exception classes.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable, InputError

# paramiko logs expected events ("channel open FAILED: Connection refused" while a server
# loads) as errors; our own messages say what matters. `deploy -vv` turns its logging back on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

if TYPE_CHECKING:
    from fabric import Connection


@dataclass(frozen=True)
class ConnectSettings:
    """Everything needed to reach one host, already templated and validated."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False
    password_env: str | None = None
    connect_timeout: float = 10.0

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts).expanduser()


def fingerprint(key: paramiko.PKey) -> str:
    """The key's SHA256 fingerprint as OpenSSH prints it (``SHA256:base64``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """The name known_hosts uses for a host: ``addr`` on port 22, else ``[addr]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # untyped
    """Refuse unknown keys, or (accept-new) append them to the known_hosts file."""

    def __init__(self, settings: ConnectSettings) -> None:
        self.settings = settings

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        path = self.settings.known_hosts_path()
        if not self.settings.accept_new_host_keys:
            raise HostKeyUnknown(
                f"{self.settings.name}: host key for {hostname} is not in {path} "
                f"({key.get_name()} {fingerprint(key)}); check it, then add it to known_hosts "
                "or pass --accept-new-host-keys"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="ascii") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


def _password(settings: ConnectSettings) -> str | None:
    if not settings.password_env:
        return None
    value = os.environ.get(settings.password_env)
    if value is None:
        raise InputError(
            f"{settings.name}: password_env names ${settings.password_env}, which is not set"
        )
    return value


_KNOWN_HOSTS: dict[tuple[str, int, int, int, int], paramiko.HostKeys] = {}
_KNOWN_HOSTS_LOCK = threading.Lock()


def _known_hosts(path: Path) -> paramiko.HostKeys:
    """``path`` parsed once per version of the file, shared by every host's thread.

    paramiko parses each line into a key object: fifty hosts each loading a fifty-line file
    was 2500 parses, ~30 ms of the GIL per run. Keyed by the file's identity, size, mtime and
    ctime, so a key appended by ``--accept-new-host-keys`` (or by anyone) is seen by the next
    host that connects. Callers only read the shared object.
    """
    info = path.stat()
    key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _KNOWN_HOSTS_LOCK:
        keys = _KNOWN_HOSTS.get(key)
        if keys is None:
            keys = _KNOWN_HOSTS[key] = paramiko.HostKeys(str(path))
        return keys


def _trust_only_known_keys(
    client: paramiko.SSHClient, settings: ConnectSettings, host: str, port: int
) -> None:
    """Give ``client`` the inventory's known_hosts keys for ``host`` and refuse all others.

    Only the entries for ``[host]:port`` (hashed ones included) are copied, under the name
    paramiko looks up; any other key the server offers is unknown (`_KnownHostsPolicy`).
    """
    known = settings.known_hosts_path()
    if known.exists():
        try:
            shared = _known_hosts(known)
        except (OSError, paramiko.SSHException) as exc:
            raise InputError(f"{settings.name}: cannot read known_hosts {known}: {exc}") from exc
        name = known_hosts_name(host, port)
        own = client.get_host_keys()
        for keytype, key in (shared.lookup(name) or {}).items():
            own.add(name, keytype, key)
    client.set_missing_host_key_policy(_KnownHostsPolicy(settings))


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


def open_connection(settings: ConnectSettings) -> Connection:
    """Open and return a Fabric `Connection` to the host, with strict host-key checking.

    Raises:
        HostKeyUnknown, HostKeyMismatch: the host's key is not trusted.
        HostUnreachable: refused, timed out, DNS failure, authentication failure.
    """
    from fabric import Config, Connection

    secret = _password(settings)
    connect_kwargs: dict[str, object] = {
        "banner_timeout": settings.connect_timeout,
        "auth_timeout": settings.connect_timeout,
        "channel_timeout": settings.connect_timeout,
    }
    if settings.identity_file:
        connect_kwargs["key_filename"] = [str(Path(settings.identity_file).expanduser())]
    if secret is not None:
        # One secret serves both purposes, as with ssh's own prompt: password or key passphrase.
        connect_kwargs["password"] = secret
        connect_kwargs["passphrase"] = secret
    conn = Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=Config(),
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=connect_kwargs,
    )
    _trust_only_known_keys(conn.client, settings, conn.host, conn.port or 22)
    # ProxyJump hops are Connections Fabric made with AutoAddPolicy: hold them to the same rule.
    hop = conn.gateway
    while hop is not None and not isinstance(hop, str):
        _trust_only_known_keys(hop.client, settings, hop.host, hop.port or 22)
        hop = hop.gateway
    try:
        if conn.gateway is None:
            conn.connect_kwargs["sock"] = _socket(conn.host, conn.port or 22, settings)
        conn.open()
    except (HostKeyUnknown, HostKeyMismatch):
        conn.close()
        raise
    except paramiko.BadHostKeyException as exc:
        conn.close()
        port = conn.port or 22
        raise HostKeyMismatch(
            f"{settings.name}: host key for {known_hosts_name(conn.host, port)} CHANGED: "
            f"known_hosts has {fingerprint(exc.expected_key)}, the server offers "
            f"{exc.key.get_name()} {fingerprint(exc.key)}. If the change is expected, run: "
            f"ssh-keygen -R '{known_hosts_name(conn.host, port)}' -f {settings.known_hosts_path()}"
        ) from exc
    except paramiko.AuthenticationException as exc:
        conn.close()
        raise HostUnreachable(
            f"{settings.name}: authentication failed as {conn.user}: {exc}"
        ) from exc
    except (OSError, EOFError, paramiko.SSHException) as exc:
        conn.close()
        target = f"{conn.host}:{conn.port}"
        if isinstance(exc, socket.timeout | TimeoutError):
            reason = f"timed out after {settings.connect_timeout:g} s"
        elif isinstance(
            exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError
        ):
            reason = "connection refused"
        else:
            reason = str(exc) or type(exc).__name__
        raise HostUnreachable(f"{settings.name}: cannot connect to {target}: {reason}") from exc
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return conn
