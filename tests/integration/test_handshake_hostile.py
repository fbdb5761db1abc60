"""Handshakes ahead of the login against a server that stops answering after the key
exchange: the host is waited for once, as a connection made at the login would be.

A relay in front of a real sshd forwards the key exchange both ways, then swallows
everything the client sends after its NEWKEYS: the ``ssh-userauth`` service request the
handshake makes ahead is never answered, nor would a login's be.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from pathlib import Path

import yaml

from tests.integration.handshakes import Listener, MakeHosts

NEWKEYS = 21


class _StallAfterKex(Listener):
    """A loopback relay to ``port`` that stops forwarding the client's bytes after NEWKEYS."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.accepted = 0
        self._sockets: list[socket.socket] = []
        super().__init__()

    def handle(self, client: socket.socket) -> None:
        self.accepted += 1
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self._sockets += [client, upstream]
        threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _down(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)

    @staticmethod
    def _up(source: socket.socket, sink: socket.socket) -> None:
        """The client's banner line, then its packets (cleartext until NEWKEYS) up to and
        including NEWKEYS; nothing after."""
        buffer, banner, stalled = b"", False, False
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if stalled:
                    continue
                buffer += data
                out = b""
                if not banner and b"\n" in buffer:
                    end = buffer.index(b"\n") + 1
                    out, buffer, banner = buffer[:end], buffer[end:], True
                while banner and not stalled and len(buffer) >= 6:
                    (length,) = struct.unpack(">I", buffer[:4])
                    if len(buffer) < 4 + length:
                        break
                    packet, buffer = buffer[: 4 + length], buffer[4 + length :]
                    out += packet
                    stalled = packet[5] == NEWKEYS
                sink.sendall(out)

    def close(self) -> None:
        super().close()
        for sock in self._sockets:
            sock.close()


def test_a_server_silent_after_the_key_exchange_is_waited_for_once(
    make_kimi_hosts: MakeHosts,
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    relay = _StallAfterKex(kimi.host.port)
    document = yaml.safe_load(deploy.inventory.read_text())
    entry = document["hosts"]["gpu-1"]
    entry.update(port=relay.port, connect_timeout=2)
    known = Path(entry["known_hosts"])
    key = kimi.host.host_key_line().split(" ", 1)[1]
    known.write_text(f"{known.read_text()}[127.0.0.1]:{relay.port} {key}\n")
    deploy.inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    try:
        result = deploy("apply", "kimi-eagle3", "--yes", "--skip-tags", "service")
    finally:
        relay.close()
    assert result.exit_code == 4, result.output
    assert "Traceback" not in result.output
    # The words a login over a fresh connection uses for a server silent at authentication
    # (paramiko's authentication timeout; deploy.remote.sshfail).
    assert f"gpu-1: not attempted: 127.0.0.1:{relay.port} refused login as" in result.output
    # One connection, one wait: the handshake's unanswered service request is the login's.
    assert relay.accepted == 1
