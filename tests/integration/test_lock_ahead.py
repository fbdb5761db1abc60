"""The requests sent ahead with the lock travel in its exec's command line (`deploy.remote.lock`).

OpenSSH's sshd opens a session channel with a zero window and grants one only with the exec's
reply, so requests written to the lock's stdin left one round trip after the exec: taking the
lock cost the channel's open, the window, then the answer. Carried in the command (a relay
feeds them to the loop, then the channel), the answer comes one round trip after the exec.
Through a 1 s link each round trip is a lower bound no load can beat, so the timing below
can only fail by load, never pass by luck (and 1 s leaves the host's own work, a login shell
and the file helper's start, most of a second even on a loaded machine). The fallbacks keep the old way: requests too large
for one command-line argument, and a state_dir where no fifo can be made (``NORELAY``).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.delay import DelayNetwork
from deploy.remote import lock
from deploy.remote.lock import acquire
from deploy.sandbox.sshd import SshHost
from tests.integration.conftest import open_remote

#: Round-trip time of the slow link, ms.
SLOW_RTT_MS = 1000.0


def _files(tmp_path: Path, count: int, size: int = 100) -> dict[str, bytes]:
    made = {}
    for index in range(count):
        path = tmp_path / "files" / f"file-{index}.txt"
        path.parent.mkdir(exist_ok=True)
        data = f"{index}:".encode() + b"x" * size + b"\n"
        path.write_bytes(data)
        made[str(path)] = data
    return made


def _take(host: SshHost, files: dict[str, bytes]) -> float:
    """Seconds to take the lock with ``files`` prefetched and have their bytes; checks them."""
    remote = open_remote(host)
    try:
        began = time.monotonic()
        held = acquire(remote, str(host.state_dir), {"run_id": "ahead"}, prefetch=list(files))
        got = {path: remote.fetch(path)[1] for path in files}
        took = time.monotonic() - began
        assert got == files, "a prefetched file came back wrong"
        assert remote.ops["wait"] == 1, remote.ops
        held.release()
    finally:
        remote.close()
    return took


@pytest.fixture
def slow_host(ssh_host: SshHost, tmp_path: Path):  # type: ignore[no-untyped-def]
    # Latency only (no congestion window): these tests count the protocol's own round
    # trips; what TCP's slow start adds to a large burst is bench/window.py's to model.
    with DelayNetwork(SLOW_RTT_MS, initial_window=0) as net:
        slow = replace(ssh_host, port=net.forward(ssh_host.port), known_hosts=tmp_path / "kh")
        (tmp_path / "kh").write_text(slow.host_key_line() + "\n")
        yield slow


def test_the_lock_and_its_reads_take_two_round_trips(slow_host: SshHost, tmp_path: Path) -> None:
    """The channel's open, then the exec and its answer (files included): 2 round trips, not 3.

    The fastest of up to three attempts is judged: a loaded machine can only add time to an
    attempt, and a third round trip would put every attempt past 2.9 RTT."""
    files = _files(tmp_path, 3)
    took = _take(slow_host, files)
    for _ in range(2):
        if took < 2.9 * SLOW_RTT_MS / 1000:
            break
        took = min(took, _take(slow_host, files))
    assert took >= 1.9 * SLOW_RTT_MS / 1000, "the open and the exec are two round trips"
    assert took < 2.9 * SLOW_RTT_MS / 1000, f"took {took * 1000:.0f} ms: the reads waited"


def test_a_command_line_near_its_budget_still_carries_them(
    slow_host: SshHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that bring the lock script close to `lock.MAX_COMMAND` (an exec request of
    ~84 kB in one SSH packet; sshd takes packets up to 256 kB) still go in the command line,
    whole, and the answer comes one round trip after the exec."""
    files = _files(tmp_path, 420, size=10)  # ~40 kB of requests
    # The fastest of up to three attempts is judged, as above.
    for _ in range(3):
        sizes: list[int] = []
        remote = open_remote(slow_host)
        real_start = remote.start

        def start_recorded(script: str, sizes: list[int] = sizes, real: Any = real_start) -> object:
            sizes.append(len(script))
            return real(script)

        monkeypatch.setattr(remote, "start", start_recorded)
        try:
            began = time.monotonic()
            held = acquire(
                remote, str(slow_host.state_dir), {"run_id": "ahead"}, prefetch=list(files)
            )
            got = {path: remote.fetch(path)[1] for path in files}
            took = time.monotonic() - began
            held.release()
        finally:
            remote.close()
        if took < 2.9 * SLOW_RTT_MS / 1000:
            break
    assert got == files
    assert sizes and 0.8 * lock.MAX_COMMAND < sizes[0] <= lock.MAX_COMMAND, (
        sizes,
        lock.MAX_COMMAND,
    )
    assert took < 2.9 * SLOW_RTT_MS / 1000, f"took {took * 1000:.0f} ms: the reads waited"


def test_requests_too_large_for_the_command_line_go_on_stdin(
    slow_host: SshHost, tmp_path: Path
) -> None:
    """Past `lock.MAX_COMMAND` the requests are written to stdin, a round trip later."""
    files = _files(tmp_path, 600, size=10)  # ~600 paths: ~70 kB of requests
    took = _take(slow_host, files)
    assert took >= 2.9 * SLOW_RTT_MS / 1000, f"took {took * 1000:.0f} ms: carried, not sent"


def test_a_state_dir_without_a_fifo_gets_them_on_stdin(slow_host: SshHost, tmp_path: Path) -> None:
    """A ``.relay`` that is no fifo and cannot be removed: the shell says ``NORELAY`` and the
    requests follow on stdin, a round trip later; the run goes on as before (and leaves the
    directory alone)."""
    blocker = slow_host.state_dir / ".relay"
    blocker.mkdir(parents=True)
    (blocker / "keep").write_text("operator's\n")
    took = _take(slow_host, _files(tmp_path, 3))
    assert took >= 2.9 * SLOW_RTT_MS / 1000, f"took {took * 1000:.0f} ms: carried, not sent"
    assert (blocker / "keep").read_text() == "operator's\n"


def test_the_budget_keeps_room_under_sudo(tmp_path: Path) -> None:
    """`lock._carried` counts sudo's second quoting: a script it accepts, quoted by
    `deploy.remote.become`, still fits Linux's 128 KiB bound on one argument."""
    worst = "'" * (lock.MAX_COMMAND // 5)
    assert lock._carried(worst)
    assert len(shlex.quote(worst)) < 128 * 1024
    assert not lock._carried("'" * (lock.MAX_COMMAND // 5 + 1))


def test_the_budget_counts_bytes_not_characters() -> None:
    """The kernel's 128 KiB bound is in bytes: 40 000 four-byte characters (a compile check's
    non-ASCII path, carried as UTF-8) are 160 kB, past it, though only 40 000 characters."""
    worst = "\U0001f40d" * 40_000
    assert len(worst.encode()) > 128 * 1024
    assert not lock._carried(worst)
