"""HTTP to a server on the host's own loopback, through the host's connection (`Host.http`).

Health and load checks never need the server exposed to the network, nor an extra exec per
request: each request is one TCP stream the transport opens as seen from the host (a
direct-tcpip channel on the SSH connection, or a local socket in the tests). A refused
connection (SGLang binds its port only after loading the weights) is `ServerUnavailable`,
which callers treat as "not yet".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import paramiko

from deploy.errors import HostUnreachable
from deploy.remote.transport import Transport


class ServerUnavailable(Exception):
    """Nothing accepts connections on that port yet (or the reply was cut)."""


@dataclass
class HttpResponse:
    status: int
    body: bytes
    headers: dict[str, str]
    elapsed: float

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
        ServerUnavailable: refused, reset, or no complete answer within ``timeout``.
        HostUnreachable: the SSH connection itself is gone.
    """
    began = time.monotonic()
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
    try:
        channel = transport.open_stream(address, port, min(timeout, 30.0))
    except ConnectionRefusedError as exc:
        raise ServerUnavailable(f"{address}:{port}: {exc or 'connect failed'}") from exc
    except (paramiko.SSHException, EOFError, OSError) as exc:
        if not transport.is_active():
            raise HostUnreachable(f"connection lost while calling {path}: {exc}") from exc
        raise ServerUnavailable(f"{address}:{port}: {exc}") from exc
    try:
        channel.settimeout(timeout)
        channel.sendall(head.encode() + b"\r\n" + payload)
        chunks = []
        while data := channel.recv(65536):
            chunks.append(data)
    except (TimeoutError, OSError, paramiko.SSHException, EOFError) as exc:
        if not transport.is_active():
            raise HostUnreachable(f"connection lost while calling {path}: {exc}") from exc
        raise ServerUnavailable(
            f"{address}:{port}{path}: no complete answer ({exc or 'timeout'})"
        ) from exc
    finally:
        channel.close()
    return parse_response(b"".join(chunks), elapsed=time.monotonic() - began)


def parse_response(raw: bytes, *, elapsed: float = 0.0) -> HttpResponse:
    """Parse a whole HTTP/1.x response (Content-Length, chunked, or read-to-close bodies).

    Raises:
        ServerUnavailable: empty or malformed (the server closed the connection early).
    """
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ServerUnavailable("connection closed before a complete HTTP answer")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ServerUnavailable(f"not an HTTP answer: {lines[0][:80]!r}")
    fields = (line.partition(":") for line in lines[1:])
    headers = {key.strip().lower(): value.strip() for key, _, value in fields}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(rest)
    elif "content-length" in headers:
        body = rest[: int(headers["content-length"])]
    else:
        body = rest
    return HttpResponse(int(parts[1]), body, headers, elapsed)


def _dechunk(data: bytes) -> bytes:
    out = []
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append(data[:size])
        data = data[size + 2 :]
    return b"".join(out)
