"""Sandbox ports: outside the ephemeral range, free, and never handed to two processes.

The CI failure this guards against: the stand-in died with EADDRINUSE on a port the kernel had
handed out by ``bind(0)`` a second earlier, because an outgoing connection took it as its source
port in between.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deploy.sandbox import ports


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


HOLDER = textwrap.dedent(
    """
    import sys
    from deploy.sandbox import ports
    ports.candidates = lambda: [int(sys.argv[1])]
    print(ports.pick_ports(1)[0], flush=True)
    sys.stdin.read()
    """
)


def a_port_nobody_picked() -> int:
    port = ports.pick_ports(1)[0]
    ports._picked.discard(port)  # let this process ask for it again, as another would
    (ports._lock_dir() / str(port)).unlink()
    return port


def test_another_live_process_s_pick_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    port = a_port_nobody_picked()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == str(port)
        monkeypatch.setattr(ports, "candidates", lambda: [port])
        with pytest.raises(OSError, match="only 0 of 1"):
            ports.pick_ports(1)
    finally:
        holder.communicate(timeout=10)  # closes its stdin: it exits
    assert ports.pick_ports(1) == [port], "a dead process's pick is free again"


def test_a_live_process_s_pick_expires_after_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    port = a_port_nobody_picked()
    record = ports._lock_dir() / str(port)
    monkeypatch.setattr(ports, "candidates", lambda: [port])
    record.write_text(f"1 {time.time():.3f}")  # pid 1 lives as long as the machine
    with pytest.raises(OSError, match="only 0 of 1"):
        ports.pick_ports(1)
    record.write_text(f"1 {time.time() - ports.HOLD - 1:.3f}")
    assert ports.pick_ports(1) == [port]
