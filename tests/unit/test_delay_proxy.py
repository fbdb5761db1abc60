"""The bench's delay proxy (bench/delay.py) really adds its round-trip time, keeps bytes in
order, does not serialise requests, and listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from bench.delay import LOOPBACK, DelayNetwork, ping_pong
from deploy.sandbox.ports import free_port


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback echo server (one connection at a time) for the proxy to forward to."""
    server = socket.create_server((LOOPBACK, 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(timeout=5)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_a_ping_pong_takes_at_least_the_round_trip_time() -> None:
    assert ping_pong(80) >= 0.080


def test_without_delay_a_ping_pong_is_fast() -> None:
    """The 80 ms above come from the delay, not from the proxy's own overhead."""
    assert ping_pong(0, rounds=5) < 0.080


def test_pipelined_requests_cost_one_round_trip_and_keep_their_order(echo_port: int) -> None:
    """Ten requests sent without waiting come back after about one RTT, not ten: the two
    directions are not serialised and nothing waits for the previous chunk's answer."""
    rtt = 0.100
    with DelayNetwork(rtt * 1000) as net:
        port = net.forward(echo_port)
        with socket.create_connection((LOOPBACK, port), timeout=10) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            began = time.perf_counter()
            for i in range(10):
                client.sendall(b"%02d" % i)
                time.sleep(0.005)
            answer = _recv_exactly(client, 20)
            took = time.perf_counter() - began
    assert answer == b"".join(b"%02d" % i for i in range(10))
    assert took >= rtt
    assert took < 4 * rtt, f"{took:.3f} s: requests were serialised (10 RTTs would be 1 s)"


def test_a_large_transfer_is_not_capped(echo_port: int) -> None:
    """4 MB both ways through a 20 ms link: latency only, no bandwidth cap, bytes intact."""
    payload = bytes(range(256)) * 16384
    with DelayNetwork(20) as net:
        port = net.forward(echo_port)
        with socket.create_connection((LOOPBACK, port), timeout=30) as client:
            sender = threading.Thread(target=client.sendall, args=(payload,))
            sender.start()
            answer = _recv_exactly(client, len(payload))
            sender.join()
    assert answer == payload


def test_it_listens_on_loopback_only(echo_port: int) -> None:
    with DelayNetwork(10) as net:
        ports = [net.forward(echo_port) for _ in range(3)]
        listening = net.listening()
    assert sorted(p for _, p in listening) == sorted(ports)
    assert {address for address, _ in listening} == {"127.0.0.1"}


def test_eof_reaches_the_other_side(echo_port: int) -> None:
    """A half-close travels through the proxy: the echo server sees EOF and closes, and the
    client reads the end of the stream (sshd and paramiko rely on EOF to end a session)."""
    with DelayNetwork(10) as net:
        port = net.forward(echo_port)
        with socket.create_connection((LOOPBACK, port), timeout=10) as client:
            client.sendall(b"bye")
            client.shutdown(socket.SHUT_WR)
            assert _recv_exactly(client, 3) == b"bye"
            assert client.recv(1) == b""


def test_a_closed_target_is_reported_and_the_client_disconnected() -> None:
    target = free_port()  # reserved for this process: nothing listens on it
    with DelayNetwork(10) as net:
        port = net.forward(target)
        with socket.create_connection((LOOPBACK, port), timeout=10) as client:
            assert client.recv(1) == b""
        assert net.errors and f"{LOOPBACK}:{target}" in net.errors[0]


def _echo_time(echo_port: int, rtt_ms: float, size: int, initial_window: int) -> float:
    payload = bytes(range(256)) * (size // 256)
    with DelayNetwork(rtt_ms, initial_window=initial_window) as net:
        port = net.forward(echo_port)
        with socket.create_connection((LOOPBACK, port), timeout=30) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            began = time.perf_counter()
            client.sendall(payload)
            answer = _recv_exactly(client, len(payload))
            took = time.perf_counter() - began
    assert answer == payload
    return took


def test_a_burst_larger_than_the_initial_window_pays_slow_start(echo_port: int) -> None:
    """60 KB on a fresh connection leaves in three flights (10, 20, then 12 segments), so its
    echo comes back after about three RTTs; a 4 KB burst, or the same 60 KB with the window
    model off, after one (bench/window.py)."""
    rtt = 0.100
    assert _echo_time(echo_port, rtt * 1000, 61_440, 10) >= 2.5 * rtt
    assert _echo_time(echo_port, rtt * 1000, 4096, 10) < 2 * rtt
    assert _echo_time(echo_port, rtt * 1000, 61_440, 0) < 2 * rtt


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        DelayNetwork(10, initial_window=-1)


def test_the_bytes_carried_are_counted_each_way(echo_port: int) -> None:
    """The wire probe reports what crossed the link from these counters (bench/wire.py)."""
    with DelayNetwork(10) as net:
        port = net.forward(echo_port)
        with socket.create_connection((LOOPBACK, port), timeout=10) as client:
            client.sendall(b"x" * 20_000)
            assert len(_recv_exactly(client, 20_000)) == 20_000
        assert net.carried == {"up": 20_000, "down": 20_000}
