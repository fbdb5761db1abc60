"""Sandbox ports: outside the ephemeral range, free, and never handed to two processes.

The CI failure this guards against: the stand-in died with EADDRINUSE on a port the kernel had
handed out by ``bind(0)`` a second earlier, because an outgoing connection took it as its source
port in between.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deploy.sandbox import ports


@pytest.fixture(autouse=True)
def own_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry of this test's own (here and in the processes it starts): the suite's other
    workers keep theirs in the real one, which a test must not rewrite under them."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def ephemeral() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_picks_are_distinct_free_and_never_ephemeral() -> None:
    low, high = ephemeral()
    avoid = set(ports.candidates()[:5000])
    picked = ports.pick_ports(40, avoid)
    assert len(set(picked)) == 40
    assert not avoid & set(picked)
    for port in picked:
        assert 10000 <= port <= 65535 and not low <= port <= high
        with socket.socket() as probe:
            # As the sandbox's servers bind: a port whose last server closed within the
            # minute still has TIME_WAIT connections, which only a bind without
            # SO_REUSEADDR refuses (the clean-clone CI flake of session 17).
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))  # free at the time of the pick
    assert not set(picked) & set(ports.pick_ports(40)), "one process never gets a port twice"


def test_a_bound_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        monkeypatch.setattr(ports, "candidates", lambda: [taken])
        with pytest.raises(OSError, match="only 0 of 1 loopback ports free"):
            ports.pick_ports(1)


#: A process whose `pick_ports` may only choose the port in argv[1].
ONLY_PORT = (
    "import sys; from deploy.sandbox import ports; ports.candidates = lambda: [int(sys.argv[1])]; "
)


def a_port_nobody_picked() -> int:
    port = ports.pick_ports(1)[0]
    ports._picked.discard(port)  # let this process ask for it again, as another would
    unpick(port)
    return port


def unpick(port: int) -> None:
    registry = ports.registry()
    kept = [line for line in registry.read_text().splitlines() if line.split()[0] != str(port)]
    registry.write_text("".join(line + "\n" for line in kept))


def test_another_process_s_pick_is_held_for_hold_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    port = a_port_nobody_picked()
    other = subprocess.run(
        [sys.executable, "-c", ONLY_PORT + "print(*ports.pick_ports(1))", str(port)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.split() == [str(port)]
    monkeypatch.setattr(ports, "candidates", lambda: [port])
    with pytest.raises(OSError, match="only 0 of 1"):
        ports.pick_ports(1)  # that process has exited: its pick still holds
    registry = ports.registry()
    aged = [
        f"{p} {pid} {float(when) - ports.HOLD - 1:.3f}" if p == str(port) else f"{p} {pid} {when}"
        for p, pid, when in (line.split() for line in registry.read_text().splitlines())
    ]
    registry.write_text("garbage line\n" + "".join(line + "\n" for line in aged))
    assert ports.pick_ports(1) == [port], "free again once older than HOLD"
    lines = registry.read_text().splitlines()
    assert "garbage line" not in lines, "a write drops what it cannot read"
    assert lines.count(next(line for line in lines if line.startswith(f"{port} "))) == 1


def test_parallel_processes_never_share_a_port() -> None:
    """8 processes picking 30 ports each at the same moment from the same 400: 240 distinct
    ports (without the registry, 240 random picks from 400 all but surely collide)."""
    low, _ = ephemeral()
    first = low - 400 - random.randrange(10000)
    script = (
        "import sys; from deploy.sandbox import ports; "
        "ports.candidates = lambda: list(range(int(sys.argv[1]), int(sys.argv[1]) + 400)); "
        "print(*ports.pick_ports(30))"
    )
    pickers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(first)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    picked = [int(p) for picker in pickers for p in picker.communicate(timeout=30)[0].split()]
    assert len(picked) == 240 and len(set(picked)) == 240
