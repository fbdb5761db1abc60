"""`SshTransport`: the `deploy.remote.transport.Transport` of a real host, over paramiko.

The one SSH connection of a host's run (opened by `deploy.remote.connect.open_connection`:
Fabric for ssh_config and ProxyJump, our host-key rules): exec channels for commands and the
lock's shell, direct-tcpip channels for HTTP to the host's loopback, SFTP for reads without the
lock. Paramiko's channel refusals become `ConnectionRefusedError`, its other failures `OSError`,
so the code above speaks only the transport interface.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import paramiko

from deploy.remote.connect import ConnectSettings, open_connection
from deploy.remote.transport import Channel, Stream

if TYPE_CHECKING:
    from fabric import Connection


class SshTransport:
    """One open Fabric `Connection`; `close` ends it (and every channel on it)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.user = str(conn.user)

    @classmethod
    def connect(cls, settings: ConnectSettings) -> SshTransport:
        """Open the connection (see `open_connection` for what it raises)."""
        return cls(open_connection(settings))

    def _transport(self) -> Any:
        transport = self._conn.client.get_transport()
        if transport is None:
            raise OSError("the SSH connection is closed")
        return transport

    @property
    def sock(self) -> Any:
        """The TCP socket under the connection (tests check its options)."""
        return self._transport().sock

    def is_active(self) -> bool:
        transport = self._conn.client.get_transport()
        return transport is not None and bool(transport.is_active())

    def open_exec(self, command: str, timeout: float) -> Channel:
        try:
            channel = self._transport().open_session(timeout=timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        result: Channel = channel
        return result

    def open_stream(self, address: str, port: int, timeout: float) -> Stream:
        try:
            channel = self._transport().open_channel(
                "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            raise ConnectionRefusedError(exc.text or "connect failed") from exc
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        result: Stream = channel
        return result

    def open_sftp(self) -> Any:
        return paramiko.SFTPClient.from_transport(self._transport())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()
