"""`QuickAckTransport`: a paramiko transport that acknowledges sshd's unanswered notice at once.

Right after a login, OpenSSH's sshd sends the ``hostkeys-00@openssh.com`` global request (its
host keys, for rotation), which asks for no reply. sshd keeps Nagle's algorithm on for a
session without a tty, so the next thing it sends — the confirmation of the channel the client
opened at the same moment — waits until that notice is acknowledged; and the client's kernel,
with nothing to send back, delays its ACK by 40 ms. Every first channel of every connection
waited those 40 ms (tcpdump, loopback: the notice, 40.6 ms of silence, the client's bare ACK,
then the confirmation), on any link, the floor's paramiko included. Flushing the pending ACK
(``TCP_QUICKACK``, Linux) when the notice has been read lets the confirmation go at once.

Linux only (elsewhere the option does not exist and nothing changes); a connection through a
ProxyJump channel has no socket of its own to flush, and is left alone.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import paramiko

from deploy import ablation

_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def ack_now(sock: Any) -> None:
    """Send the ACK the kernel is holding back for what ``sock`` received, now (best effort)."""
    if _QUICKACK is None or not isinstance(sock, socket.socket) or ablation.off("quickack"):
        return
    # Not TCP (a socketpair in tests), or closed meanwhile: nothing to flush.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


class QuickAckTransport(paramiko.Transport):  # type: ignore[misc]  # untyped
    """`paramiko.Transport`, plus an immediate ACK of every global request the server sends."""

    def _parse_global_request(self, m: Any) -> None:
        super()._parse_global_request(m)
        ack_now(self.sock)
