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

import base64
import hashlib
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from deploy import trace
from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable, InputError
from deploy.remote.knownhosts import KnownHosts, Verdict
from deploy.remote.sshauth import auth_kwargs
from deploy.remote.sshfail import describe

# paramiko logs expected events ("channel open FAILED: Connection refused" while a server
# loads) as errors; our own messages say what matters. `deploy -vv` turns its logging back on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

if TYPE_CHECKING:
    from fabric import Connection

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class ConnectSettings:
    """Everything needed to reach one host, already templated and validated."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    #: None: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts.
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    password_env: str | None = None
    connect_timeout: float = 10.0
    #: The one ssh_config file to read (``ssh -F``); None: Fabric's defaults.
    ssh_config: str | None = None
    #: Run every host operation as ``become_user`` through sudo (`deploy.remote.become`).
    become: bool = False
    become_user: str = "root"
    become_password_env: str | None = None

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()


def fingerprint(key: paramiko.PKey) -> str:
    """The key's SHA256 fingerprint as OpenSSH prints it (``SHA256:base64``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """The name known_hosts uses for a host: ``addr`` on port 22, else ``[addr]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


# -- known_hosts -------------------------------------------------------------------------------

_KNOWN_HOSTS: dict[tuple[str, int, int, int, int], KnownHosts] = {}
_KNOWN_HOSTS_LOCK = threading.Lock()


def _known_hosts(path: Path) -> KnownHosts:
    """``path`` parsed once per version of the file, shared by every host's thread.

    Fifty hosts each parsing a fifty-line file was 2500 parses, ~30 ms of the GIL per run.
    Keyed by the file's identity, size, mtime and ctime, so a key appended by
    ``--accept-new-host-keys`` (or by anyone) is seen by the next host that connects.
    Callers only read the shared object. A missing file is an empty one.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return KnownHosts(str(path))
    key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _KNOWN_HOSTS_LOCK:
        known = _KNOWN_HOSTS.get(key)
        if known is None:
            text = path.read_text(encoding="utf-8", errors="replace")
            known = _KNOWN_HOSTS[key] = KnownHosts.parse(text, str(path))
        return known


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # untyped
    """Judge every key the server offers against known_hosts (paramiko is given none)."""

    def __init__(self, settings: ConnectSettings, files: list[Path], name: str) -> None:
        self.settings = settings
        self.files = files
        self.name = name

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        who, name = self.settings.name, self.name
        offered = f"{key.get_name()} {fingerprint(key)}"
        for path in self.files:
            verdict, entry = _known_hosts(path).verdict(name, key.get_name(), key.asbytes())
            where = f"{path}:{entry.line}" if entry else str(path)
            if verdict is Verdict.TRUSTED:
                return
            if verdict is Verdict.REVOKED:
                raise HostKeyMismatch(
                    f"{who}: host key for {name} is REVOKED ({where}: {offered}); refusing to "
                    "connect: the host needs a new key, then add that key to known_hosts"
                )
            if verdict is Verdict.CHANGED:
                raise HostKeyMismatch(
                    f"{who}: host key for {name} CHANGED: {where} has another "
                    f"{key.get_name()} key, the server offers {offered}. If the change is "
                    f"expected, run: ssh-keygen -R '{name}' -f {path}"
                )
            if verdict is Verdict.CERT_AUTHORITY_ONLY:
                raise HostKeyUnknown(
                    f"{who}: {where} trusts {name} only through @cert-authority, and deploy "
                    "cannot verify host certificates (paramiko has no client-side support); "
                    f"check the host's key ({offered}) and add it to known_hosts as a plain line"
                )
        first = self.files[0]
        if not self.settings.accept_new_host_keys:
            raise HostKeyUnknown(
                f"{who}: host key for {name} is not in {first} ({offered}); check it, then "
                "add it to known_hosts or pass --accept-new-host-keys"
            )
        first.parent.mkdir(parents=True, exist_ok=True)
        with first.open("a", encoding="ascii") as handle:
            handle.write(f"{name} {key.get_name()} {key.get_base64()}\n")


def _preferring(types: list[str]) -> Callable[..., paramiko.Transport]:
    """A transport factory that offers the host's listed key types first, as OpenSSH does.

    paramiko prefers only the type of the first key it was given for the host; we give it
    none (`_KnownHostsPolicy` judges every key), so the preference is set here instead.
    """
    wanted: list[str] = []
    for key_type in types:
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if key_type == "ssh-rsa" else [key_type]

    def factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(sock, **kwargs)
        options = transport.get_security_options()
        supported = list(options.key_types)
        first = [t for t in wanted if t in supported]
        options.key_types = first + [t for t in supported if t not in first]
        return transport

    return factory


def _known_files(settings: ConnectSettings, ssh_config: dict[str, Any]) -> list[Path]:
    """The inventory's known_hosts, else ssh_config's UserKnownHostsFile(s), else the default."""
    if settings.known_hosts:
        return [settings.known_hosts_path()]
    listed = ssh_config.get("userknownhostsfile")
    if listed:
        names = listed.split() if isinstance(listed, str) else list(listed)
        return [Path(n).expanduser() for n in names if n != "/dev/null"] or [
            Path(DEFAULT_KNOWN_HOSTS).expanduser()
        ]
    return [Path(DEFAULT_KNOWN_HOSTS).expanduser()]


def _guard(conn: Connection, settings: ConnectSettings) -> None:
    """Give ``conn`` our host-key policy and our key-type preference for its host."""
    port = conn.port or 22
    name = known_hosts_name(conn.host, port)
    files = _known_files(settings, conn.ssh_config)
    types: list[str] = []
    for path in files:
        try:
            types += _known_hosts(path).key_types(name)
        except OSError as exc:
            raise InputError(f"{settings.name}: cannot read known_hosts {path}: {exc}") from exc
    conn.client.set_missing_host_key_policy(_KnownHostsPolicy(settings, files, name))
    conn.connect_kwargs["transport_factory"] = _preferring(types)


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


@trace.spanned("ssh.connect")
def open_connection(settings: ConnectSettings) -> Connection:
    """Open and return a Fabric `Connection` to the host, with strict host-key checking.

    Raises:
        HostKeyUnknown, HostKeyMismatch: the host's key is not trusted (or revoked).
        HostUnreachable: refused, timed out, DNS failure, authentication failure, a key that
            cannot be decrypted; one line each (`deploy.remote.sshfail`).
        InputError: ``password_env`` names an unset variable; unreadable ssh_config.
    """
    from fabric import Config, Connection

    try:
        config = Config(runtime_ssh_path=settings.ssh_config)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{settings.name}: cannot read ssh_config {settings.ssh_config}: {exc}"
        ) from exc
    timeouts = {
        "banner_timeout": settings.connect_timeout,
        "auth_timeout": settings.connect_timeout,
        "channel_timeout": settings.connect_timeout,
    }
    conn = Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=config,
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=dict(timeouts),
    )
    auth, attempt = auth_kwargs(settings, conn)
    conn.connect_kwargs.update(auth)
    _guard(conn, settings)
    # ProxyJump hops are Connections Fabric made with AutoAddPolicy: hold them to the same
    # rules, and log in to them the same way.
    hop = conn.gateway
    while hop is not None and not isinstance(hop, str):
        hop_auth, _ = auth_kwargs(settings, hop)
        hop.connect_kwargs.update(timeouts, **hop_auth)
        _guard(hop, settings)
        hop = hop.gateway
    try:
        if conn.gateway is None:
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
