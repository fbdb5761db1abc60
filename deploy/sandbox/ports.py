"""Loopback ports for sandbox servers that are chosen now and bound a moment later.

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, the same range
every outgoing ``connect()`` draws its source port from. Released and handed to a server that
binds it a second later, it can meanwhile become the source port of one of the hundreds of SSH
and HTTP connections a test run opens: CI saw the SGLang stand-in die with ``EADDRINUSE`` on a
port deploy had just found free. So ports are drawn at random from outside that range, where
only an explicit bind can take them, and each pick is recorded in a file under the temp
directory for `HOLD` seconds (far longer than any server takes to bind), so parallel test
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


def _lock_dir() -> Path:
    """The records' directory: this user's own, so no other user can plant or steer them."""
    path = Path(tempfile.gettempdir()) / f"deploy-sandbox-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if info.st_uid != os.getuid() or not path.is_dir() or path.is_symlink():
        raise OSError(errno.EPERM, f"{path} is not a directory of this user's")
    return path


def _reserve(port: int) -> bool:
    """Record ``port`` as picked by this process; False when another process picked it less
    than `HOLD` seconds ago and still lives.

    The record is read and rewritten under an exclusive ``flock``, so two processes that pick
    the same port at the same moment cannot both get it.
    """
    fd = os.open(
        _lock_dir() / str(port), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+") as record:
            holder, _, when = record.read().partition(" ")
            if holder.isdigit() and int(holder) != os.getpid() and _alive(int(holder)):
                try:
                    if time.time() - float(when) < HOLD:
                        return False
                except ValueError:
                    pass
            record.seek(0)
            record.truncate()
            record.write(f"{os.getpid()} {time.time():.3f}")
        return True
    finally:
        os.close(fd)  # also drops the flock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pick_ports(count: int, avoid: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """``count`` distinct loopback ports, free now, outside the ephemeral range, not in ``avoid``
    and reserved for this process.

    A port can still be bound by an unrelated program before the caller's server binds it;
    callers that can move (sshd) retry on another.

    Raises:
        OSError: fewer than ``count`` such ports are free.
    """
    pool = [p for p in candidates() if p not in avoid]
    random.SystemRandom().shuffle(pool)
    chosen: list[int] = []
    for port in pool:
        if len(chosen) == count:
            break
        if port in _picked or not _bindable(port) or not _reserve(port):
            continue
        _picked.add(port)
        chosen.append(port)
    if len(chosen) < count:
        raise OSError(errno.EADDRNOTAVAIL, f"only {len(chosen)} of {count} loopback ports free")
    return chosen


def free_port() -> int:
    """One port from `pick_ports`."""
    return pick_ports(1)[0]
