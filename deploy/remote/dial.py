"""Connects made ahead: the first hosts' TCP connects and client banners go while the client
still loads.

Once its input is valid, ``deploy apply`` spends ~65 ms of CPU importing the SSH stack and the
engine (paramiko, Fabric, the steps) before its first connect. Then two round trips pass before
the key exchange can start: the TCP handshake, and the client's banner to sshd's KEXINIT (sshd
sends it once it has the client's banner). `start` makes both on threads first, so that they
overlap the imports; `deploy.remote.connect` hands the socket to paramiko as ``sock=`` (public
API: Fabric passes a ProxyJump channel the same way), and paramiko finds sshd's banner and
KEXINIT waiting. The transport is told that the banner sent (`BANNER`) is its
``local_version`` (a public attribute, which the key exchange hashes), and the socket
(`_BannerSent`) drops paramiko's write of it. No paramiko member is overridden.

A socket is used only for the exact ``(host, port)`` Fabric resolves for a connection without
a gateway, within `MAX_AGE` of its connect and while the server has not hung up (sshd drops a
silent client after ``LoginGraceTime``, 120 s by default); any other is closed unused.
`start` dials nothing when an ssh_config file Fabric reads could move the connection
(`movable`): the only address ever dialed ahead is the one the login itself would reach.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from deploy import ablation

#: Seconds a socket dialed ahead stays usable: a login normally takes it within ~0.1 s; one
#: that waited longer (a passphrase typed) connects anew, well inside sshd's LoginGraceTime.
MAX_AGE = 5.0
#: ssh_config keywords that change where Fabric connects (``Include`` is followed instead).
_MOVING = frozenset({"hostname", "port", "proxyjump", "proxycommand", "match"})
_SYSTEM, _USER = "/etc/ssh/ssh_config", "~/.ssh/config"


#: The client banner of a dialed connection: paramiko's form (``SSH-2.0-paramiko_<version>``),
#: without the version, which costs ~2-4 ms of the critical path to look up before paramiko
#: is imported. The transport is told it is its ``local_version`` (`deploy.remote.hostkeys`).
BANNER = "SSH-2.0-paramiko_deploy"


class _BannerSent(socket.socket):
    """A connected socket whose client banner (``banner``) was sent at the connect: the first
    `send`, paramiko's write of that banner, is dropped (anything after it in the call goes)."""

    banner = ""
    unsent = b""

    def send(self, data: Any, flags: int = 0) -> int:
        pending, self.unsent = self.unsent, b""
        if not pending:
            return super().send(data, flags)
        if bytes(data[: len(pending)]) != pending:  # not paramiko's banner: refuse, never mix
            raise OSError(f"the SSH banner was already sent as {pending!r}")
        if len(data) > len(pending):
            super().sendall(data[len(pending) :], flags)
        return len(data)


class _Dial(threading.Thread):
    def __init__(self, target: tuple[str, int], timeout: float, ident: str) -> None:
        super().__init__(name=f"dial {target[0]}:{target[1]}", daemon=True)
        self.target, self.timeout, self.banner = target, timeout, ident
        self.sock: _BannerSent | None = None
        self.error: OSError | None = None
        self.done = 0.0
        self.abandoned = False

    def run(self) -> None:
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection(self.target, timeout=self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = sent = _BannerSent(sock.family, sock.type, sock.proto, fileno=sock.detach())
            sent.settimeout(self.timeout)
            line = f"{self.banner}\r\n".encode("ascii")
            sent.sendall(line)
            sent.banner, sent.unsent = self.banner, line
        except OSError as exc:
            if sock is not None:
                sock.close()
            self.error = exc
            return
        finally:
            self.done = time.monotonic()
        with _LOCK:
            if self.abandoned:  # `close_all` came first: nobody will take it
                sent.close()
            else:
                self.sock = sent


_AHEAD: dict[tuple[str, int], _Dial] = {}
_LOCK = threading.Lock()


def start(targets: Iterable[tuple[str, int, float]], ssh_configs: Iterable[str | None]) -> int:
    """Dial each ``(address, port, connect timeout)`` on a thread; how many were started.

    Nothing is dialed when one of ``ssh_configs`` (the files the hosts' logins read; None:
    Fabric's defaults) could move a connection: the logins then connect as without this.
    """
    if ablation.off("dial") or any(movable(path) for path in set(ssh_configs)):
        return 0
    with _LOCK:
        for address, port, timeout in targets:
            if (address, port) not in _AHEAD:
                _AHEAD[(address, port)] = dial = _Dial((address, port), timeout, BANNER)
                dial.start()
        return len(_AHEAD)


def take(host: str, port: int) -> socket.socket | None:
    """The socket dialed ahead to ``(host, port)``, its banner sent; None: connect now, as
    without it (none was dialed, or it is older than `MAX_AGE`).

    Raises:
        OSError: the connect made ahead failed, as the login's own would have.
    """
    with _LOCK:
        dial = _AHEAD.pop((host, port), None)
    if dial is None:
        return None
    dial.join()
    if dial.error is not None:
        raise dial.error
    sock = dial.sock
    if sock is not None and (time.monotonic() - dial.done > MAX_AGE or _closed_by_peer(sock)):
        sock.close()
        return None
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server already hung up (sshd's ``LoginGraceTime``, a restart): then the
    login connects anew rather than read a banner that will never come."""
    timeout = sock.gettimeout()
    sock.settimeout(0)  # a socket with a timeout would wait for data first
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False  # nothing yet, connection open
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def close_all() -> None:
    """Close every socket not taken (hosts never reached: an early end, max_fail, Ctrl-C)."""
    with _LOCK:
        left = list(_AHEAD.values())
        _AHEAD.clear()
        for dial in left:
            dial.abandoned = True  # a connect still under way closes its socket itself
    for dial in left:
        if dial.sock is not None:
            with contextlib.suppress(OSError):
                dial.sock.close()


def movable(path: str | None, depth: int = 0) -> bool:
    """Whether an ssh_config Fabric reads (``path``; None: the user's and the system's) sets
    anything that changes where a login connects: then nothing is dialed ahead.

    Conservative: any such keyword anywhere (whatever ``Host`` it is under), an unreadable
    file or ``Include`` nesting past 16 levels counts.
    """
    if path is None:
        return movable(_USER, depth) or movable(_SYSTEM, depth)
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for line in text.splitlines():
        words = line.strip().replace("=", " ", 1).split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        keyword = words[0].lower()
        if keyword in _MOVING:
            return True
        if keyword == "include" and len(words) > 1:
            nested = (movable(found, depth + 1) for found in _included(words[1], file))
            if depth >= 16 or any(nested):
                return True
    return False


def _included(patterns: str, origin: Path) -> list[str]:
    """The files an ``Include`` names: relative ones from /etc/ssh in a system file, else from
    ~/.ssh (ssh_config(5))."""
    system = str(origin).startswith("/etc/ssh/")
    base = Path("/etc/ssh") if system else Path("~/.ssh").expanduser()
    found: list[str] = []
    for pattern in patterns.split():
        pattern = os.path.expanduser(pattern.strip('"'))
        found += sorted(glob.glob(pattern if os.path.isabs(pattern) else str(base / pattern)))
    return found
