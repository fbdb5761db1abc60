"""Loopback ports for sandbox servers that are chosen now and bound a moment later.

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, the same range
every outgoing ``connect()`` draws its source port from. Released and handed to a server that
binds it a second later, it can meanwhile become the source port of one of the hundreds of SSH
and HTTP connections a test run opens: CI saw the SGLang stand-in die with ``EADDRINUSE`` on a
port deploy had just found free. So ports are drawn at random from outside that range, where
only an explicit bind can take them, and each pick is written to one registry file under the
temp directory for `HOLD` seconds (far longer than any server takes to bind), so parallel test
workers and demos never pick the same one. A bind probe skips ports that are already bound.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

# Never below this: the low ports are where well-known services and operators' servers live.
_LOWEST = 10000
_HIGHEST = 65535
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
HOLD = 120.0  # seconds a pick stays reserved against other processes
_picked: set[int] = set()  # never handed out twice by one process


def _ephemeral() -> tuple[int, int]:
    """The kernel's ephemeral range (Linux default when it cannot be read)."""
    try:
        low, high = (int(n) for n in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def candidates() -> list[int]:
    """Every port this module may hand out: 10000-65535 minus the ephemeral range."""
    low, high = _ephemeral()
    return [p for p in range(_LOWEST, _HIGHEST + 1) if not low <= p <= high]


def registry() -> Path:
    """The file of recent picks (``port pid time`` lines), in a directory of this user's own
    so that no other user can plant or steer it."""
    directory = Path(tempfile.gettempdir()) / f"deploy-sandbox-ports-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    info = directory.lstat()
    if info.st_uid != os.getuid() or not directory.is_dir() or directory.is_symlink():
        raise OSError(errno.EPERM, f"{directory} is not a directory of this user's")
    return directory / "picks"


def _held(lines: list[str], now: float) -> dict[int, tuple[int, float]]:
    """The picks still in force: those younger than `HOLD`, whoever made them.

    Not shortened when the picking process ends: the server it started may still be on its
    way to binding the port (and a pid can be reused)."""
    held: dict[int, tuple[int, float]] = {}
    for line in lines:
        try:
            port, pid, when = line.split()
            entry = int(port), int(pid), float(when)
        except ValueError:
            continue  # a torn or foreign line: ignore it, it is dropped on the next write
        if now - entry[2] < HOLD:
            held[entry[0]] = entry[1:]
    return held


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pick_ports(count: int, avoid: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct loopback ports, free now, outside the ephemeral range, not in
    ``avoid``, not picked by this process before nor by any in the last `HOLD` seconds.

    The registry is read, pruned of expired picks and rewritten under an exclusive ``flock``,
    so two processes picking at the same moment never get the same port and the file only
    ever holds the last `HOLD` seconds of picks. A port can still be bound by an unrelated
    program before the caller's server binds it; callers that can move (sshd) retry.

    Raises:
        OSError: fewer than ``count`` such ports are free.
    """
    pool = [p for p in candidates() if p not in avoid and p not in _picked]
    random.SystemRandom().shuffle(pool)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(registry(), flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a few ms: probes only, no waiting
        with os.fdopen(os.dup(fd), "r+") as record:
            now = time.time()
            held = _held(record.read().splitlines(), now)
            chosen: list[int] = []
            for port in pool:
                if len(chosen) == count:
                    break
                if port not in held and _bindable(port):
                    chosen.append(port)
            if len(chosen) < count:
                raise OSError(
                    errno.EADDRNOTAVAIL, f"only {len(chosen)} of {count} loopback ports free"
                )
            held.update(dict.fromkeys(chosen, (os.getpid(), now)))
            record.seek(0)
            record.truncate()
            record.write("".join(f"{p} {pid} {when:.3f}\n" for p, (pid, when) in held.items()))
    finally:
        os.close(fd)  # also drops the flock
    _picked.update(chosen)
    return chosen


def free_port() -> int:
    """One port from `pick_ports`."""
    return pick_ports(1)[0]
