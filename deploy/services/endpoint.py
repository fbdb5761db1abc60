"""Where a server answers and how it wants to be asked: its address, port and API key.

Every probe (health, server_info, generate, the gate's load) goes to the address the server
listens on, as seen on the host: an address it is bound to (``127.0.0.7:30000``), or loopback
when it listens on a wildcard (``0.0.0.0``: 127.0.0.1; ``[::]``: ::1). A server not yet
listening (a restart's new one) is asked where its ``--host`` says it will bind (SGLang's
default: 127.0.0.1), else where the service's ``address`` says.

SGLang started with ``--api-key KEY`` wants ``Authorization: Bearer KEY`` on everything but
``/health*`` and ``/metrics``. The key is the server's own: its ``--api-key`` (read from its
command line in /proc), else ``SGLANG_API_KEY`` in its environment (a launcher that passes it
through), else the service's ``api_key`` (an inventory secret: ``"{{ sglang_api_key }}"``).
Every key found is registered with `deploy.masking`, so it shows as ``***`` in the terminal,
``--json``, history, the log file and the webhook.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deploy import masking
from deploy.config.services import ServiceSpec
from deploy.edits.cmdline import parse
from deploy.services.state import ServiceState

#: The environment variable a launcher may hand SGLang's API key in.
API_KEY_ENV = "SGLANG_API_KEY"
#: SGLang's ``--host`` default.
SGLANG_DEFAULT_HOST = "127.0.0.1"
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1", "*": "127.0.0.1"}


@dataclass(frozen=True)
class Endpoint:
    """One server's HTTP address on the host, and the key it wants (``repr`` hides it)."""

    address: str
    port: int
    api_key: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint({self.where()}, api key {'set' if self.api_key else 'none'})"

    def where(self) -> str:
        """``127.0.0.7:30000`` or ``[::1]:30000``."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    def headers(self) -> dict[str, str]:
        """What every request but a health check sends (nothing without a key)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def probe_address(host: str) -> str:
    """The address to connect to for a server bound to ``host`` (a wildcard: loopback)."""
    host = host.strip().strip("[]")
    return _WILDCARDS.get(host, host)


def listen_address(listen: Sequence[str], port: int) -> str | None:
    """The address to ask, from a server's listening sockets (``0.0.0.0:30000``,
    ``[::]:30000``, ``127.0.0.7:30000``) on ``port``: a wildcard's loopback first (it
    answers wherever the server is bound), then an IPv4 address, then IPv6; None if none."""
    found: list[str] = []
    for item in listen:
        host, _, port_text = item.rpartition(":")
        if port_text.isdigit() and int(port_text) == port:
            found.append(host.strip("[]"))
    if not found:
        return None
    wildcard = [h for h in found if h in _WILDCARDS]
    if wildcard:
        return probe_address(sorted(wildcard)[0])  # "0.0.0.0" before "::"
    ipv4 = [h for h in found if ":" not in h]
    return sorted(ipv4 or found)[0]


def listening(tables: str) -> list[str]:
    """Every listening TCP socket in the text of ``/proc/net/tcp`` and ``/proc/net/tcp6``, as
    `listen_address` takes them (``127.0.0.7:30000``, ``[::]:30000``): for a look that has no
    server process to start from (``deploy status``)."""
    found = []
    for line in tables.splitlines():
        cols = line.split()
        if len(cols) < 4 or cols[3] != "0A" or ":" not in cols[1]:  # 0A: TCP_LISTEN
            continue
        hex_host, _, hex_port = cols[1].partition(":")
        try:
            raw, port = bytes.fromhex(hex_host), int(hex_port, 16)
        except ValueError:
            continue
        if len(raw) == 4:
            found.append(f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{port}")
        elif len(raw) == 16:  # four host-order 32-bit words
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
            found.append(f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{port}")
    return found


def api_key_of(argv: Sequence[str], env: Mapping[str, str], match: str = "") -> str | None:
    """The server's own API key: ``--api-key`` on its command line, else ``SGLANG_API_KEY``."""
    values = parse(argv, match).values("--api-key") if argv else None
    key = values[-1] if values else env.get(API_KEY_ENV) or None
    return key or None


def endpoint_of(
    spec: ServiceSpec,
    *,
    argv: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    listen: Sequence[str] = (),
) -> Endpoint:
    """Where the server with this command line, environment and sockets answers, and its key
    (registered as a secret)."""
    address = listen_address(listen, spec.port)
    if address is None and argv:
        hosts = parse(argv, spec.match).values("--host")
        address = probe_address(hosts[-1] if hosts else SGLANG_DEFAULT_HOST)
    key = api_key_of(argv, env or {}, spec.match) or spec.api_key or None
    if key:
        masking.register(key)
    return Endpoint(address or spec.address, spec.port, key)


def endpoint_of_state(spec: ServiceSpec, state: ServiceState) -> Endpoint:
    """Where a running server (or the one a journal record describes) answers."""
    return endpoint_of(spec, argv=state.argv, env=state.env, listen=state.listen)
