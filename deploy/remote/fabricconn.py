"""The parts of a host's connection made before anything is negotiated: Fabric's
`Connection` (ssh_config read, nothing opened) and the TCP socket under it.

Used both by the login (`deploy.remote.connect`) and by the handshake made ahead of it
(`deploy.remote.early`), which is why they live below both.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from deploy.errors import InputError
from deploy.remote.settings import ConnectSettings

if TYPE_CHECKING:
    from fabric import Connection


def tcp_socket(host: str, port: int, settings: ConnectSettings) -> socket.socket:
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


def fabric_connection(settings: ConnectSettings) -> Connection:
    """Fabric's `Connection` for the host (ssh_config read), not yet opened.

    Raises:
        InputError: unreadable ssh_config.
    """
    from fabric import Config, Connection

    try:
        config = Config(runtime_ssh_path=settings.ssh_config)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{settings.name}: cannot read ssh_config {settings.ssh_config}: {exc}"
        ) from exc
    return Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=config,
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=timeouts(settings),
    )


def timeouts(settings: ConnectSettings) -> dict[str, float]:
    return {
        "banner_timeout": settings.connect_timeout,
        "auth_timeout": settings.connect_timeout,
        "channel_timeout": settings.connect_timeout,
    }
