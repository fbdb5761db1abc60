"""`Dial`: a handshake's TCP connect and client banner, made before the SSH stack is imported.

Its own module, free of paramiko, because both sides use it: `deploy.remote.handshake` (which
runs before paramiko is imported) makes it, `deploy.remote.early` hands its socket to paramiko.
"""

from __future__ import annotations

import contextlib
import socket
import time

from deploy.remote.settings import ConnectSettings

#: The identification string a handshake's `Dial` sends: paramiko's own form. The transport
#: is told it was sent (`deploy.remote.connect`), since the key exchange hashes it.
BANNER = "SSH-2.0-paramiko_deploy"


class Dial:
    """The TCP connect and the client's banner, made before the thread imports paramiko.

    sshd answers a client's banner with its KEXINIT: sent with the connect, that round trip
    overlaps the import (~0.1 s), and paramiko finds the server's banner and KEXINIT waiting.
    The connect is the one `deploy.remote.connect` makes (same call, same errors); a failure
    to send the banner is left to the ordinary path, which reports it in its own words.
    ``began`` is when the banner went: the key exchange's start (span ``ssh.key_exchange``).
    """

    def __init__(self, settings: ConnectSettings) -> None:
        self.target = (settings.address, settings.port or 22)
        self.sock: socket.socket | None = None
        self.error: OSError | None = None
        self.began = 0.0
        try:
            sock = socket.create_connection(self.target, timeout=settings.connect_timeout)
        except OSError as exc:
            self.error = exc
            return
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.began = time.perf_counter()
            sock.sendall(f"{BANNER}\r\n".encode("ascii"))
        except OSError:
            sock.close()
            return
        self.sock = sock

    def take(self, target: tuple[str, int]) -> socket.socket | None:
        """The connected socket (banner sent) if it went to ``target``; None: connect anew.

        Raises:
            OSError: the connect failed, as the ordinary connect would have.
        """
        sock, self.sock = self.sock, None
        if target != self.target:
            if sock is not None:
                sock.close()
            return None
        if self.error is not None:
            raise self.error
        return sock

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
