"""`Wire`: the paramiko transport under every connection, with the speed it needs.

**Compression after login** (``zlib@openssh.com``): fewer bytes, so fewer round trips. The
lock's command line carries the host programs (~36 KB of Python and shell), the host answers
with the files read (the SGLang model file is 29 KB). A fresh TCP connection may have only 10
segments (~14 KB) in flight, doubling once per round trip, so a 36 KB burst costs one round
trip more than a 14 KB one on a real link (`bench/window.py`; loopback never shows it); zlib
brings the lock's exec to ~11.5 KB for ~1 ms of CPU per 100 KB. Only the delayed method is
offered (as OpenSSH since 7.4): nothing an unauthenticated peer sends is decompressed.
``compression: false`` in the inventory offers none. Security (issue 17): paramiko compresses
each packet on its own (``Z_FULL_FLUSH``), so a length can only reveal how that packet
compresses — a CRIME-style risk only for a file mixing a secret with text someone else
controls (``compression: false`` is the answer); the sudo password travels in a packet of its
own. A compromised host's packet may inflate ~1000-fold, but it can already send unbounded
data in a channel.

**TCP_QUICKACK after sshd's notice.** Right after a login, sshd sends the
``hostkeys-00@openssh.com`` global request, which asks for no reply, and keeps Nagle on for a
session without a tty: the confirmation of the channel the client opened meanwhile waits until
that notice is acknowledged, and the client's kernel, with nothing to send, delays its ACK by
40 ms (tcpdump, loopback: the notice, 40.6 ms of silence, a bare ACK, the confirmation).
Flushing the pending ACK (``TCP_QUICKACK``, Linux; elsewhere nothing changes) once the notice
is read lets the confirmation go at once. A ProxyJump channel has no socket of its own to flush.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from typing import Any

import paramiko

from deploy import ablation

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
    """`paramiko.Transport` offering only delayed zlib (or nothing), acknowledging every global
    request the server sends at once."""

    def use_compression(self, compress: bool = True) -> None:
        # paramiko's own offers pre-authentication ``zlib`` as well, and
        # ``SSHClient.connect`` calls this after the transport factory (``compress=``), so
        # the choice is made here, where that call cannot undo it.
        on = compress and not ablation.off("compression")
        self.get_security_options().compression = DELAYED if on else OFF

    def _parse_global_request(self, m: Any) -> None:
        super()._parse_global_request(m)
        ack_now(self.sock)


def preferring(types: list[str], *, compress: bool = True) -> Callable[..., paramiko.Transport]:
    """A `Wire` factory that offers the host's listed key types first, as OpenSSH does, and
    delayed compression unless ``compress`` is false.

    paramiko prefers only the type of the first key it was given for the host; we give it
    none (`deploy.remote.hostkeys.KnownHostsPolicy` judges every key), so the preference is
    set here instead.
    """
    wanted: list[str] = []
    for key_type in types:
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if key_type == "ssh-rsa" else [key_type]

    def factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
        transport = Wire(sock, **kwargs)
        # A banner sent with the connect (deploy.remote.dial) is the one the key exchange hashes.
        transport.local_version = getattr(sock, "banner", transport.local_version)
        transport.use_compression(compress)
        options = transport.get_security_options()
        supported = list(options.key_types)
        first = [t for t in wanted if t in supported]
        options.key_types = first + [t for t in supported if t not in first]
        return transport

    return factory
