"""Host keys: known_hosts read once per version, and the policy that judges a server's key.

`deploy.remote.connect` gives every connection a `KnownHostsPolicy` (`policy_for`): each key
a server offers is judged against known_hosts as OpenSSH reads it (`deploy.remote.knownhosts`)
and refused in one line that says what to do. Judging only reads (`KnownHostsPolicy.judge`);
the one write, recording a new key under ``accept-new``, is `KnownHostsPolicy.record`.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from deploy.errors import HostKeyMismatch, HostKeyUnknown, InputError
from deploy.remote.compression import compressing
from deploy.remote.knownhosts import KnownHosts, Verdict
from deploy.remote.quickack import QuickAckTransport
from deploy.remote.settings import DEFAULT_KNOWN_HOSTS, ConnectSettings

if TYPE_CHECKING:
    from fabric import Connection


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


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # untyped
    """Judge every key the server offers against known_hosts (paramiko is given none)."""

    def __init__(self, settings: ConnectSettings, files: list[Path], name: str) -> None:
        self.settings = settings
        self.files = files
        self.name = name

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if not self.judge(key):
            self.record(key)

    def judge(self, key: paramiko.PKey) -> bool:
        """True: the key is trusted; False: unknown, to be recorded (``accept-new``).

        Reads only: the write of an accepted new key is `record`.

        Raises:
            HostKeyMismatch: changed or revoked.
            HostKeyUnknown: unknown (without accept-new), or trusted only through a CA.
        """
        who, name = self.settings.name, self.name
        offered = f"{key.get_name()} {fingerprint(key)}"
        for path in self.files:
            verdict, entry = _known_hosts(path).verdict(name, key.get_name(), key.asbytes())
            where = f"{path}:{entry.line}" if entry else str(path)
            if verdict is Verdict.TRUSTED:
                return True
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
        if not self.settings.accept_new_host_keys:
            raise HostKeyUnknown(
                f"{who}: host key for {name} is not in {self.files[0]} ({offered}); check it, "
                "then add it to known_hosts or pass --accept-new-host-keys"
            )
        return False

    def record(self, key: paramiko.PKey) -> None:
        """Append an accepted new key to the first known_hosts file (OpenSSH's accept-new)."""
        first = self.files[0]
        first.parent.mkdir(parents=True, exist_ok=True)
        with first.open("a", encoding="ascii") as handle:
            handle.write(f"{self.name} {key.get_name()} {key.get_base64()}\n")


def preferring(
    types: list[str],
    cls: type[paramiko.Transport] = QuickAckTransport,
    *,
    compress: bool = True,
) -> Callable[..., paramiko.Transport]:
    """A transport factory that offers the host's listed key types first, as OpenSSH does,
    and delayed compression unless ``compress`` is false (`deploy.remote.compression`).

    paramiko prefers only the type of the first key it was given for the host; we give it
    none (`KnownHostsPolicy` judges every key), so the preference is set here instead.
    """
    made = compressing(cls)
    wanted: list[str] = []
    for key_type in types:
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if key_type == "ssh-rsa" else [key_type]

    def factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
        transport = made(sock, **kwargs)
        # A banner sent with the connect (deploy.remote.dial) is the one the key exchange hashes.
        transport.local_version = getattr(sock, "banner", transport.local_version)
        transport.use_compression(compress)
        options = transport.get_security_options()
        supported = list(options.key_types)
        first = [t for t in wanted if t in supported]
        options.key_types = first + [t for t in supported if t not in first]
        return transport

    return factory


def known_files(settings: ConnectSettings, ssh_config: dict[str, Any]) -> list[Path]:
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


def known_key_types(settings: ConnectSettings, files: list[Path], name: str) -> list[str]:
    """The key types ``files`` list for host ``name``, in order (to prefer in the handshake).

    Raises:
        InputError: a known_hosts file cannot be read.
    """
    types: list[str] = []
    for path in files:
        try:
            types += _known_hosts(path).key_types(name)
        except OSError as exc:
            raise InputError(f"{settings.name}: cannot read known_hosts {path}: {exc}") from exc
    return types


def policy_for(conn: Connection, settings: ConnectSettings) -> tuple[KnownHostsPolicy, list[str]]:
    """Our host-key policy for ``conn``'s host, and the key types known_hosts lists for it.

    Raises:
        InputError: a known_hosts file cannot be read.
    """
    name = known_hosts_name(conn.host, conn.port or 22)
    files = known_files(settings, conn.ssh_config)
    return KnownHostsPolicy(settings, files, name), known_key_types(settings, files, name)
