"""Host keys: known_hosts read the way OpenSSH reads it, and the policy that judges a server's key.

paramiko's own ``HostKeys`` keeps one key per (host, type) — the last one wins, so a host listed
with two keys of one type during a key rotation looked "CHANGED" — and raises on the
``@revoked`` and ``@cert-authority`` markers that OpenSSH's sshd(8) documents. So the file is
parsed here, line by line (`KnownHosts`, pure: text in, a verdict out), once per version of
the file. `deploy.remote.connect` gives every connection a `KnownHostsPolicy` (`policy_for`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from deploy.errors import HostKeyMismatch, HostKeyUnknown, InputError
from deploy.remote.settings import DEFAULT_KNOWN_HOSTS, ConnectSettings

if TYPE_CHECKING:
    from fabric import Connection


class Verdict(Enum):
    """What known_hosts says about a key offered by a host."""

    TRUSTED = "trusted"  #: one of the host's listed keys
    UNKNOWN = "unknown"  #: the host is not listed with a key of this type
    CHANGED = "changed"  #: the host is listed with other keys of this type only
    REVOKED = "revoked"  #: the key is on an ``@revoked`` line
    CERT_AUTHORITY_ONLY = "cert-authority"  #: only a CA is listed for the host


@dataclass(frozen=True)
class Entry:
    """One key line: which hosts it names, the key, and where it was written."""

    marker: str  #: "", "@revoked" or "@cert-authority"
    patterns: str  #: the host field as written (comma-separated, maybe hashed)
    key_type: str
    blob: bytes
    line: int

    def matches(self, name: str) -> bool:
        """Whether the host field names ``name`` (OpenSSH: a negated match vetoes)."""
        if self.patterns.startswith("|1|"):
            return _hashed_match(self.patterns, name)
        hit = False
        for pattern in self.patterns.split(","):
            negated = pattern.startswith("!")
            if _glob(pattern[1:] if negated else pattern, name):
                if negated:
                    return False
                hit = True
        return hit


def _glob(pattern: str, name: str) -> bool:
    """OpenSSH's host patterns: ``*`` and ``?`` only; brackets are literal (``[addr]:port``)."""
    if "*" not in pattern and "?" not in pattern:
        return pattern == name
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


def _hashed_match(field_text: str, name: str) -> bool:
    """``|1|salt|hash``: HMAC-SHA1 of the name keyed by the salt (ssh-keygen -H)."""
    try:
        _, _, salt64, digest64 = field_text.split("|", 3)
        salt = base64.b64decode(salt64)
        digest = base64.b64decode(digest64)
    except ValueError:  # binascii.Error is one
        return False
    mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(mine, digest)


def family(key_type: str) -> str:
    """An RSA key is listed as ``ssh-rsa`` whichever signature algorithm the connection
    negotiates (rsa-sha2-256/512): one family for matching."""
    return "ssh-rsa" if key_type in ("rsa-sha2-256", "rsa-sha2-512") else key_type


@dataclass
class KnownHosts:
    """A parsed known_hosts file; read only after `parse`, so threads may share it. A line that
    cannot be parsed (an unknown marker, too few fields, a key not in base64) is skipped, as
    OpenSSH skips it."""

    entries: list[Entry] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> KnownHosts:
        known = cls()
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            marker = ""
            if parts[0].startswith("@"):
                marker = parts.pop(0)
                if marker not in ("@revoked", "@cert-authority"):
                    continue
            if len(parts) < 3:
                continue
            try:
                blob = base64.b64decode(parts[2], validate=True)
            except ValueError:  # binascii.Error is one
                continue
            known.entries.append(Entry(marker, parts[0], parts[1], blob, number))
        return known

    def for_host(self, name: str) -> list[Entry]:
        """Every line naming ``name`` (``addr``, or ``[addr]:port`` off port 22)."""
        return [e for e in self.entries if e.matches(name)]

    def key_types(self, name: str) -> list[str]:
        """Types of the plain keys listed for the host, in file order (`connect._guard`'s)."""
        return list(dict.fromkeys(e.key_type for e in self.for_host(name) if not e.marker))

    def verdict(self, name: str, key_type: str, blob: bytes) -> tuple[Verdict, Entry | None]:
        """Judge the key ``(key_type, blob)`` offered by host ``name``, and the entry the
        verdict rests on (for the message's line number). Revoked wins over everything (sshd(8):
        "@revoked ... shall never be accepted"); several keys of one type may be listed
        (rotation); a host listed only through ``@cert-authority`` is reported as such."""
        lines = self.for_host(name)
        for entry in lines:
            if entry.marker == "@revoked" and entry.blob == blob:
                return Verdict.REVOKED, entry
        plain = [e for e in lines if not e.marker]
        for entry in plain:
            if entry.blob == blob and family(entry.key_type) == family(key_type):
                return Verdict.TRUSTED, entry
        same_type = [e for e in plain if family(e.key_type) == family(key_type)]
        if same_type:
            return Verdict.CHANGED, same_type[0]
        authorities = [e for e in lines if e.marker == "@cert-authority"]
        if authorities and not plain:
            return Verdict.CERT_AUTHORITY_ONLY, authorities[0]
        return Verdict.UNKNOWN, None


_KNOWN_HOSTS: dict[tuple[str, int, int, int, int], KnownHosts] = {}
_KNOWN_HOSTS_LOCK = threading.Lock()


def _known_hosts(path: Path) -> KnownHosts:
    """``path`` parsed once per version of the file (a missing one is empty), shared read-only
    by every host's thread: fifty hosts each parsing a fifty-line file was 2500 parses, ~30 ms
    of the GIL per run. Keyed by the file's identity, size, mtime and ctime, so a key appended
    by ``--accept-new-host-keys`` (or by anyone) is seen by the next host that connects."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return KnownHosts()
    key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _KNOWN_HOSTS_LOCK:
        known = _KNOWN_HOSTS.get(key)
        if known is None:
            text = path.read_text(encoding="utf-8", errors="replace")
            known = _KNOWN_HOSTS[key] = KnownHosts.parse(text)
        return known


@dataclass
class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # untyped
    """Judge every key the server offers against known_hosts (paramiko is given none)."""

    settings: ConnectSettings
    files: list[Path]
    name: str

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        """Return if the key is trusted, or unknown under ``accept-new`` (then recorded: the
        one write, appended to the first known_hosts file as OpenSSH does).

        Raises:
            HostKeyMismatch: changed or revoked.
            HostKeyUnknown: unknown (without accept-new), or trusted only through a CA.
        """
        who, name = self.settings.name, self.name
        digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
        offered = f"{key.get_name()} SHA256:{digest}"  # the fingerprint as OpenSSH prints it
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
                f"{who}: host key for {name} is not in {first} ({offered}); check it, "
                "then add it to known_hosts or pass --accept-new-host-keys"
            )
        first.parent.mkdir(parents=True, exist_ok=True)
        with first.open("a", encoding="ascii") as handle:
            handle.write(f"{name} {key.get_name()} {key.get_base64()}\n")


def policy_for(conn: Connection, settings: ConnectSettings) -> tuple[KnownHostsPolicy, list[str]]:
    """Our host-key policy for ``conn``'s host, and the key types known_hosts lists for it, in
    order (to prefer in the handshake). The files: the inventory's known_hosts, else
    ssh_config's UserKnownHostsFile(s), else the default; the name: ``addr`` on port 22, else
    ``[addr]:port``, as known_hosts writes it.

    Raises:
        InputError: a known_hosts file cannot be read.
    """
    port = conn.port or 22
    name = conn.host if port == 22 else f"[{conn.host}]:{port}"
    listed = conn.ssh_config.get("userknownhostsfile")
    if settings.known_hosts:
        files = [Path(settings.known_hosts).expanduser()]
    else:
        names = (listed.split() if isinstance(listed, str) else list(listed)) if listed else []
        files = [Path(n).expanduser() for n in names if n != "/dev/null"]
        files = files or [Path(DEFAULT_KNOWN_HOSTS).expanduser()]
    types: list[str] = []
    for path in files:
        try:
            types += _known_hosts(path).key_types(name)
        except OSError as exc:
            raise InputError(f"{settings.name}: cannot read known_hosts {path}: {exc}") from exc
    return KnownHostsPolicy(settings, files, name), types
