"""HTTP to a server on the host's own loopback, through the host's connection (`Host.http`).

Health and load checks never need the server exposed to the network, nor an extra exec per
request: each request is one TCP stream the transport opens as seen from the host (a
direct-tcpip channel on the SSH connection, or a local socket in the tests). A refused
connection (SGLang binds its port only after loading the weights) is `ServerUnavailable`,
which callers treat as "not yet".
"""

from __future__ import annotations

import http.client
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import paramiko

from deploy.errors import HostUnreachable
from deploy.remote.transport import Stream, Transport


class ServerUnavailable(Exception):
    """Nothing accepts connections on that port yet (or the reply was cut)."""


@dataclass
class HttpResponse:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


def request(
    transport: Transport,
    address: str,
    port: int,
    method: str,
    path: str,
    *,
    body: Any = None,
    timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
) -> HttpResponse:
    """One HTTP/1.1 request with ``Connection: close`` over one stream of ``transport``
    (``headers``: extra ones, e.g. ``Authorization``; never logged).

    Raises:
        ServerUnavailable: refused, reset, or no complete answer within ``timeout`` (empty,
            malformed or cut short).
        HostUnreachable: the SSH connection itself is gone.
    """
    payload = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {address}:{port}\r\nConnection: close\r\n"
        f"User-Agent: deploy\r\nAccept: application/json\r\nContent-Length: {len(payload)}\r\n"
    )
    if body is not None:
        head += "Content-Type: application/json\r\n"
    for name, value in (headers or {}).items():
        if "\r" in name + value or "\n" in name + value:
            raise ValueError(f"header {name!r}: no line breaks allowed")
        head += f"{name}: {value}\r\n"
    channel: Stream | None = None
    try:
        channel = transport.open_stream(address, port, min(timeout, 30.0))
        channel.settimeout(timeout)
        channel.sendall(head.encode() + b"\r\n" + payload)
        chunks = []
        while data := channel.recv(65536):
            chunks.append(data)
    except ConnectionRefusedError as exc:  # nothing listens there (yet)
        raise ServerUnavailable(f"{address}:{port}: {exc or 'connect failed'}") from exc
    except (TimeoutError, OSError, paramiko.SSHException, EOFError) as exc:
        if not transport.is_active():
            raise HostUnreachable(f"connection lost while calling {path}: {exc}") from exc
        raise ServerUnavailable(
            f"{address}:{port}{path}: no complete answer ({exc or 'timeout'})"
        ) from exc
    finally:
        if channel is not None:
            channel.close()
    # The standard library's parser (Content-Length, chunked, read-to-close bodies) over the
    # bytes read; it would take a cut header for a whole one.
    raw = b"".join(chunks)
    if b"\r\n\r\n" not in raw:
        raise ServerUnavailable("connection closed before a complete HTTP answer")
    received = SimpleNamespace(makefile=lambda mode: io.BytesIO(raw))  # all it reads a socket by
    response = http.client.HTTPResponse(received)  # type: ignore[arg-type]
    try:
        response.begin()
        answer = response.read()
    except (http.client.HTTPException, ValueError) as exc:
        raise ServerUnavailable(f"no complete HTTP answer ({type(exc).__name__}: {exc})") from exc
    return HttpResponse(response.status, answer)
