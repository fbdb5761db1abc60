"""A TCP proxy on loopback that cuts connections on command: the network fault of the tests.

Placed between `deploy` and a sandbox sshd (the inventory names the proxy's port, and
known_hosts names ``[127.0.0.1]:PROXYPORT``), it forwards bytes both ways until it is told to
cut. Cutting is driven from the client's side: every chunk that `deploy` sends is first shown
to the armed trigger, and when the trigger fires that chunk is *held* — never delivered — while
the trigger's action runs (e.g. SIGKILL of the deploy process), then every connection is reset.

Why hold the chunk: `deploy` waits for the answer to each journal append (write + fsync) before
doing anything else, so "the journal on the host has N lines" becomes true exactly between
two requests. A trigger that tests it sees the first chunk sent *after* line N and stops it at
the proxy: the fault lands at that step boundary every time, not somewhere near it, with no
sleep in the playbook. ``extra_bytes`` lets a fired trigger pass that many more bytes before
cutting, which puts the cut in the middle of a transfer.

Only loopback is used: the proxy listens on 127.0.0.1 and connects to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

_CHUNK = 65536


@dataclass
class _Armed:
    when: Callable[[], bool]
    action: Callable[[], None] | None
    extra_bytes: int
    cut: bool = True
    fired: bool = False
    remaining: int = 0


class CuttingProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target_port`` until told to cut.

    Lifecycle: created listening; `arm` sets a one-shot trigger; `cut` resets every open
    connection now; `close` (or leaving the ``with`` block) stops it. Later connections are
    forwarded normally after a cut, so the *next* deploy command reaches the host.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: _Armed | None = None
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        #: Set when an armed trigger fired (and its connection was cut).
        self.fired = threading.Event()
        self.cuts = 0
        #: Why a connection could not be forwarded (for a test's failure message).
        self.errors: list[str] = []
        self.bytes_up = 0
        self.bytes_down = 0
        self._thread = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._thread.start()

    # -- control ------------------------------------------------------------------------------

    def arm(
        self,
        when: Callable[[], bool],
        *,
        action: Callable[[], None] | None = None,
        extra_bytes: int = 0,
        cut: bool = True,
    ) -> None:
        """Cut at the first client chunk for which ``when()`` is true (checked per chunk).

        With ``cut=False`` the chunk is held only while ``action`` runs, then delivered: the
        client is frozen at that boundary (e.g. while a second run tries the same host).
        """
        with self._lock:
            self.fired.clear()
            self._armed = _Armed(when, action, extra_bytes, cut, remaining=extra_bytes)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def retarget(self, target_port: int) -> None:
        """Send new connections to another port (a different sshd on "the same address")."""
        self.target_port = target_port

    def cut(self) -> None:
        """Reset every open connection now (RST to both sides)."""
        with self._lock:
            conns, self._conns = self._conns, []
            self.cuts += 1 if conns else 0
        for pair in conns:
            for sock in pair:
                _reset(sock)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            # shutdown wakes the accept() of our thread; close() alone would not (Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()
        self._thread.join(timeout=5)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- forwarding ---------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError as exc:
                self.errors.append(f"cannot reach 127.0.0.1:{self.target_port}: {exc}")
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.append((client, upstream))
            threading.Thread(
                target=self._pump, args=(client, upstream), name="proxy-pump", daemon=True
            ).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [], 1.0)
                if self._closed:
                    return
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    if sock is not client:
                        client.sendall(data)
                        self.bytes_down += len(data)
                        continue
                    deliver, fire = self._screen(data)
                    if fire is not None and not fire.cut:
                        if fire.action is not None:
                            fire.action()
                        self.fired.set()
                        deliver, fire = data, None
                    if deliver:
                        upstream.sendall(deliver)
                        self.bytes_up += len(deliver)
                    if fire is not None:
                        # the server now holds a torn transfer (or nothing of this chunk)
                        if fire.action is not None:
                            fire.action()
                        self.fired.set()
                        self.cut()
                        return
        except (OSError, ValueError):  # ValueError: a socket another pump's cut() closed (fd -1)
            return
        finally:
            with self._lock:
                if (client, upstream) in self._conns:
                    self._conns.remove((client, upstream))
            _reset(client)
            _reset(upstream)

    def _screen(self, data: bytes) -> tuple[bytes, _Armed | None]:
        """The part of a client chunk to deliver, and the trigger if it fired (cut after)."""
        with self._lock:
            armed = self._armed
            if armed is None:
                return data, None
            if not armed.fired:
                try:
                    hit = armed.when()
                except Exception:  # a trigger that cannot decide yet has not fired
                    hit = False
                if not hit:
                    return data, None
                armed.fired = True
            if armed.remaining >= len(data):
                armed.remaining -= len(data)
                return data, None
            self._armed = None
            return data[: armed.remaining], armed


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped link or a dead middlebox looks to a peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
