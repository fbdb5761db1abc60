"""Counts the client's delayed ACKs while a channel opens (run by test_quickack, in its own netns).

The kernel's TcpExt DelayedACKs counter is per network namespace, so in a fresh one holding
only this process and its sshd sandbox, its change across ``open_session`` is exactly the ACKs
that waited out the 40 ms timer on that connection. Prints JSON: for plain paramiko and for
deploy's connection, a list of [delayed ACKs, milliseconds] per open.
"""

from __future__ import annotations

import fcntl
import json
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def loopback_up() -> None:
    """A new namespace's ``lo`` is down; bring it up without needing iproute2."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def delayed_acks() -> int:
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:], strict=True))["DelayedACKs"])
    raise RuntimeError("no TcpExt line in /proc/net/netstat")


def main(rounds: int) -> None:
    loopback_up()
    import paramiko

    from deploy.sandbox.sshd import SshdSandbox
    from tests.integration.conftest import open_remote

    out: dict[str, list[list[float]]] = {"plain": [], "deploy": []}

    def measure(kind: str, transport: paramiko.Transport) -> None:
        before, began = delayed_acks(), time.monotonic()
        transport.open_session().close()
        took = (time.monotonic() - began) * 1000
        out[kind].append([delayed_acks() - before, round(took, 1)])

    with SshdSandbox(Path(tempfile.mkdtemp())) as sandbox:
        host = sandbox.start("quickack")
        for _ in range(rounds):
            client = paramiko.SSHClient()
            client.load_host_keys(str(host.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            sock = socket.create_connection((host.address, host.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.connect(
                host.address,
                port=host.port,
                username=host.user,
                key_filename=str(host.identity_file),
                look_for_keys=False,
                allow_agent=False,
                sock=sock,
            )
            measure("plain", client.get_transport())
            client.close()
            remote = open_remote(host)
            measure("deploy", remote.transport._transport())
            remote.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
