"""A TCP forwarder on loopback that delays every chunk by a fixed one-way time: a slow network.

Between a tool and a sandbox sshd, each `DelayProxy` listens on ``127.0.0.1:port`` (and
nowhere else) and forwards to ``127.0.0.1:target``. Every chunk read from either side is
stamped with the time it arrived and written to the other side ``one_way`` seconds later, in
order. The two directions are independent tasks with their own queues, and a direction keeps
reading while earlier chunks wait, so the link has latency and no bandwidth cap: a pipelined
burst of requests costs one round trip, not one per request. That is what a real WAN between
a workstation and a cloud region looks like to SSH, whose cost is round trips.

What a long path adds to TCP itself is modelled in one respect: the congestion window of a
fresh connection (`bench.window`, on by default: 10 segments of 1448 bytes, slow start,
restart after idle, as Linux). Each direction of each connection releases bytes into the delay
line only as far as its window allows, and its window grows as the bytes it sent are
acknowledged one RTT later; so a 45 KB burst costs two round trips more than a 1 KB one, as on a
real WAN, where the bare proxy would let it through in one. ``initial_window=0`` turns the
model off (latency only). Not reproduced: the tool's socket talks to the proxy over loopback,
so its own ACKs come back at once; Nagle's algorithm and delayed ACKs therefore cost what they
cost on loopback, not a round trip each. The proxy's own sockets run with TCP_NODELAY so that
the proxy adds no wait of its own.

One asyncio event loop in a daemon thread serves every proxy of a `DelayNetwork`; the bench's
main thread only waits for child processes, so the loop has the interpreter to itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any

from bench.window import INITIAL_SEGMENTS, Window

LOOPBACK = "127.0.0.1"
_CHUNK = 65536


class DelayNetwork:
    """An event loop thread and the delay proxies it runs, all with the same round-trip time.

    Lifecycle: ``with DelayNetwork(rtt_ms) as net: port = net.forward(target_port)``; leaving
    the block closes every listener and connection and stops the thread.
    """

    def __init__(self, rtt_ms: float, initial_window: int = INITIAL_SEGMENTS) -> None:
        if rtt_ms < 0:
            raise ValueError("the round-trip time cannot be negative")
        if initial_window < 0:
            raise ValueError("the initial window cannot be negative")
        self.rtt_ms = rtt_ms
        self.one_way = rtt_ms / 2000.0
        #: Segments of a fresh connection's congestion window (`bench.window`); 0: no model.
        self.initial_window = initial_window
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        #: Why a connection could not be forwarded (shown by the bench if a run fails).
        self.errors: list[str] = []
        #: Bytes carried so far, all connections: "up" from the tools, "down" from the hosts.
        self.carried = {"up": 0, "down": 0}
        self._thread = threading.Thread(target=self.loop.run_forever, name="delay", daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def forward(self, target_port: int) -> int:
        """Start a proxy to ``127.0.0.1:target_port``; returns the port it listens on."""
        server: asyncio.Server = self._call(self._listen(target_port))
        return int(server.sockets[0].getsockname()[1])

    def listening(self) -> list[tuple[str, int]]:
        """Every address a proxy of this network listens on (always 127.0.0.1)."""
        return [s.getsockname()[:2] for srv in self._servers for s in srv.sockets]

    async def _listen(self, target_port: int) -> asyncio.Server:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Cancelled by `close`: end quietly (asyncio would log the cancellation).
            with contextlib.suppress(asyncio.CancelledError):
                await self._connect(reader, writer, target_port)

        server = await asyncio.start_server(accept, LOOPBACK, 0, backlog=256)
        self._servers.append(server)
        return server

    async def _connect(
        self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter, target_port: int
    ) -> None:
        """One client connection: dial the target, then pump both ways, each on its own."""
        try:
            up_r, up_w = await asyncio.open_connection(LOOPBACK, target_port)
        except OSError as exc:
            self.errors.append(f"cannot reach {LOOPBACK}:{target_port}: {exc}")
            down_w.close()
            return
        for writer in (down_w, up_w):
            _nodelay(writer)
            self._writers.add(writer)
        pumps = [
            asyncio.ensure_future(self._pump(down_r, up_w, "up")),
            asyncio.ensure_future(self._pump(up_r, down_w, "down")),
        ]
        await asyncio.gather(*pumps, return_exceptions=True)
        for writer in (down_w, up_w):
            self._writers.discard(writer)
            writer.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str
    ) -> None:
        """Read chunks as they come; a second task writes each one ``one_way`` s after it
        left, in order. EOF travels with the same delay (a half-close, as TCP does). With a
        window model, a chunk leaves (enters the delay line) only as far as the window allows
        (`_shaped`)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer))
        try:
            if self.initial_window and self.one_way:
                await self._shaped(reader, queue, direction)
            else:
                while True:
                    data = await _read(reader)
                    self.carried[direction] += len(data)
                    queue.put_nowait((self.loop.time() + self.one_way, data))
                    if not data:
                        break
            await sender
        finally:
            sender.cancel()

    async def _shaped(
        self,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[tuple[float, bytes]],
        direction: str,
    ) -> None:
        """Move what ``reader`` brings into ``queue`` as one direction's congestion window
        lets it leave: bytes beyond the window wait for the ACKs of earlier ones."""
        window = Window(self.one_way * 2, self.initial_window)
        pending = bytearray()
        arrived = asyncio.Event()
        ended = False

        async def read() -> None:
            nonlocal ended
            while data := await _read(reader):
                self.carried[direction] += len(data)
                pending.extend(data)
                arrived.set()
            ended = True
            arrived.set()

        reading = asyncio.ensure_future(read())
        try:
            while True:
                if not pending:
                    if ended:
                        queue.put_nowait((self.loop.time() + self.one_way, b""))
                        return
                    arrived.clear()
                    await arrived.wait()
                    continue
                now = self.loop.time()
                room = window.room(now)
                if room == 0:
                    await asyncio.sleep(max(0.0, (window.next_ack() or now) - now))
                    continue
                chunk = bytes(pending[:room])
                del pending[:room]
                window.sent(now, len(chunk))
                queue.put_nowait((now + self.one_way, chunk))
        finally:
            reading.cancel()

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        while True:
            due, data = await queue.get()
            wait = due - self.loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return

    def close(self) -> None:
        """Stop listening, drop every connection, cancel every pump, stop the thread."""

        async def shut() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                self._call(shut())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()

    def __enter__(self) -> DelayNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _read(reader: asyncio.StreamReader) -> bytes:
    """The next chunk, or b"" at EOF or on a reset (the connection is over either way)."""
    try:
        return await reader.read(_CHUNK)
    except OSError:
        return b""


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def ping_pong(rtt_ms: float, rounds: int = 3) -> float:
    """Seconds of the fastest of ``rounds`` one-byte ping-pongs through a `DelayNetwork` to a
    loopback echo server: the round trip the proxy really adds (it must be >= ``rtt_ms``)."""
    echo = socket.create_server((LOOPBACK, 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = echo.accept()
            with conn:
                while data := conn.recv(_CHUNK):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    best = float("inf")
    try:
        with DelayNetwork(rtt_ms) as net:
            port = net.forward(echo.getsockname()[1])
            with socket.create_connection((LOOPBACK, port), timeout=10) as client:
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _ in range(rounds):
                    began = time.perf_counter()
                    client.sendall(b"x")
                    if client.recv(1) != b"x":
                        raise OSError("the delay proxy did not echo the ping")
                    best = min(best, time.perf_counter() - began)
    finally:
        echo.close()
        thread.join(timeout=5)
    return best
