"""known_hosts read the way OpenSSH reads it: markers, several keys per host, hashed names.

paramiko's own ``HostKeys`` keeps one key per (host, type) — the last one wins, so a host listed
with two keys of one type during a key rotation looked "CHANGED" — and raises on the
``@revoked`` and ``@cert-authority`` markers that OpenSSH's sshd(8) documents. This module
parses the file itself, line by line, and answers the one question a connection asks: for this
host name and the key the server offered, is it trusted, unknown, changed or revoked?

Pure: text in, a verdict out (`KnownHosts.verdict`). `deploy.remote.connect` reads the file
and turns the verdict into our exceptions and messages.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from enum import Enum


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
    except (ValueError, binascii.Error):
        return False
    mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(mine, digest)


#: Key types that are one family for matching: an RSA key is listed as ``ssh-rsa`` whichever
#: signature algorithm (rsa-sha2-256/512) the connection negotiates.
_FAMILY = {"rsa-sha2-256": "ssh-rsa", "rsa-sha2-512": "ssh-rsa"}


def family(key_type: str) -> str:
    return _FAMILY.get(key_type, key_type)


@dataclass
class KnownHosts:
    """A parsed known_hosts file; read only after `parse`, so threads may share it."""

    path: str
    entries: list[Entry] = field(default_factory=list)
    #: Lines that could not be parsed, as (line number, reason): OpenSSH skips them too.
    skipped: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, path: str = "known_hosts") -> KnownHosts:
        known = cls(path)
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            marker = ""
            if parts[0].startswith("@"):
                marker = parts.pop(0)
                if marker not in ("@revoked", "@cert-authority"):
                    known.skipped.append((number, f"unknown marker {marker}"))
                    continue
            if len(parts) < 3:
                known.skipped.append((number, "expected: hosts key-type base64-key"))
                continue
            try:
                blob = base64.b64decode(parts[2], validate=True)
            except (ValueError, binascii.Error):
                known.skipped.append((number, "the key is not base64"))
                continue
            known.entries.append(Entry(marker, parts[0], parts[1], blob, number))
        return known

    def for_host(self, name: str) -> list[Entry]:
        """Every line naming ``name`` (``addr``, or ``[addr]:port`` off port 22)."""
        return [e for e in self.entries if e.matches(name)]

    def key_types(self, name: str) -> list[str]:
        """Types of the plain keys listed for the host, in file order (to prefer in the
        handshake, as OpenSSH does, so that a host with several keys offers a known one)."""
        seen: list[str] = []
        for entry in self.for_host(name):
            if not entry.marker and entry.key_type not in seen:
                seen.append(entry.key_type)
        return seen

    def verdict(self, name: str, key_type: str, blob: bytes) -> tuple[Verdict, Entry | None]:
        """Judge the key ``(key_type, blob)`` offered by host ``name``.

        Revoked wins over everything (sshd(8): "@revoked ... shall never be accepted"); then
        any listed key of the host that equals it (several per type: rotation); then a listed
        key of the same type that differs means CHANGED; a host listed only through
        ``@cert-authority`` is reported as such, since its key is to be proven by a certificate.
        The entry returned is the one the verdict rests on (for the message's line number).
        """
        lines = self.for_host(name)
        for entry in self.entries:  # @revoked applies to the key wherever its host field points
            if entry.marker == "@revoked" and entry.blob == blob and entry.matches(name):
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
