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
a gateway, within `MAX_AGE` of its connect and while the server has not hung up; any other is
closed unused. Nothing is dialed where a config file Fabric reads could move a login
(`movable`, `fabric_moves`): the only address ever dialed ahead is the one the login would reach.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shlex
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
#: ssh_config keywords that change where Fabric connects (``Include`` is followed instead);
#: paramiko's lookup canonicalizes a name (CanonicalizeHostname with CanonicalDomains) too.
_MOVING = frozenset(
    {"hostname", "port", "proxyjump", "proxycommand", "match", "canonicalizehostname"}
)
_SYSTEM, _USER = "/etc/ssh/ssh_config", "~/.ssh/config"
#: A line as paramiko's `SSHConfig.parse` reads it (``SETTINGS_REGEX``): keyword and value.
_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")
#: Fabric's config files (invoke's system and user prefixes; each suffix invoke loads) and the
#: settings there that change where a login connects (``ssh_config_path`` replaces the files
#: `movable` reads, even the inventory's ``ssh_config``).
_FABRIC = ("/etc/fabric.", "~/.fabric.")
_FABRIC_MOVING = frozenset({"port", "gateway", "ssh_config_path"})


#: The client banner sent: paramiko's form (``SSH-2.0-paramiko_<version>``) without the
#: version, which would cost ~2-4 ms of the critical path to look up before paramiko is imported.
BANNER = "SSH-2.0-paramiko_deploy"


class _BannerSent(socket.socket):
    """A connected socket whose client banner (``banner``) was sent at the connect: paramiko's
    write of that banner is dropped (anything after it goes), whether it comes through `send`
    or `sendall`, in one call or in pieces; a write that is not that banner is refused."""

    banner = ""
    unsent = b""

    def send(self, data: Any, flags: int = 0) -> int:
        rest = self._after_banner(data)
        if rest is None:
            return super().send(data, flags)
        if rest:
            super().sendall(rest, flags)
        return len(data)

    def sendall(self, data: Any, flags: int = 0) -> None:
        rest = self._after_banner(data)
        super().sendall(data if rest is None else rest, flags)

    def _after_banner(self, data: Any) -> bytes | None:
        """What of ``data`` follows the part of the banner it repeats; None: nothing is
        pending (write ``data`` as is)."""
        pending = self.unsent
        if not pending:
            return None
        written = bytes(data)
        common = min(len(written), len(pending))
        if written[:common] != pending[:common]:  # not paramiko's banner: refuse, never mix
            raise OSError(f"the SSH banner was already sent as {self.banner!r}")
        self.unsent = pending[common:]
        return written[common:]


def tcp_socket(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to the host with Nagle's algorithm off (TCP_NODELAY), dialed ahead or not.

    paramiko leaves Nagle on, and its public-key authentication then waits out the peer's
    delayed ACK: ~40 ms of a ~60 ms login on loopback, on every host, every run (measured in
    docs/performance.md). OpenSSH's own client turns Nagle off for the same reason. Errors
    surface exactly as Fabric's own connect would raise them.
    """
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _Dial(threading.Thread):
    def __init__(self, target: tuple[str, int], timeout: float) -> None:
        super().__init__(name=f"dial {target[0]}:{target[1]}", daemon=True)
        self.target, self.timeout = target, timeout
        self.sock: _BannerSent | None = None
        self.error: OSError | None = None
        self.done = 0.0
        self.abandoned = False

    def run(self) -> None:
        sock: socket.socket | None = None
        try:
            sock = tcp_socket(*self.target, self.timeout)
            sock = sent = _BannerSent(sock.family, sock.type, sock.proto, fileno=sock.detach())
            sent.settimeout(self.timeout)
            line = f"{BANNER}\r\n".encode("ascii")
            sent.sendall(line)
            sent.banner, sent.unsent = BANNER, line
        except OSError as exc:
            if sock is not None:
                sock.close()
            self.error = exc
            return
        finally:
            self.done = time.monotonic()
        with _LOCK:
            if self.abandoned:  # `discard` came first: nobody will take it
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
    if ablation.off("dial") or fabric_moves() or any(movable(p) for p in set(ssh_configs)):
        return 0
    with _LOCK:
        for address, port, timeout in targets:
            if (address, port) not in _AHEAD:
                _AHEAD[(address, port)] = dial = _Dial((address, port), timeout)
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


def discard(target: tuple[str, int] | None = None) -> None:
    """Close the socket dialed to ``target``, ``(host, port)``, if no login took it: its login
    stopped before (a key nobody can decrypt), and the host must not keep an unauthenticated
    client until the run ends. None: every one (hosts never reached: an early end, max_fail,
    Ctrl-C)."""
    with _LOCK:
        dials = [_AHEAD.pop(key) for key in list(_AHEAD) if target in (None, key)]
        for dial in dials:
            dial.abandoned = True  # a connect still under way closes its socket itself
    for dial in dials:
        if dial.sock is not None:
            with contextlib.suppress(OSError):
                dial.sock.close()


def movable(path: str | None) -> bool:
    """Whether an ssh_config Fabric reads (``path``; None: the user's and the system's) sets
    anything that changes where a login connects: then nothing is dialed ahead.

    Conservative: any such keyword anywhere (whatever ``Host`` it is under), an unreadable
    file or ``Include`` nesting past 16 levels counts. So does a ``path`` Fabric will not
    open (it tests ``os.path.exists`` before expanding ``~``): every login is then an input
    error, and its host is not to be touched.
    """
    if path is None:
        return _moves(_USER) or _moves(_SYSTEM)
    return not os.path.exists(path) or _moves(path)


def _moves(path: str, depth: int = 0) -> bool:
    """`movable` for one file Fabric reads and those it includes (a missing one: nothing)."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError):  # Fabric cannot read it either: no login connects
        return True
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        setting = _SETTING.match(line)
        if setting is None:  # paramiko refuses the file: every login fails before connecting
            return True
        keyword = setting[1].lower()
        if keyword in _MOVING:
            return True
        if keyword == "host":  # paramiko splits its patterns as shell words, or fails every login
            try:
                shlex.split(setting[2])
            except ValueError:
                return True
        if keyword == "include":
            nested = (_moves(found, depth + 1) for found in _included(setting[2], file))
            if depth >= 16 or any(nested):
                return True
    return False


def fabric_moves() -> bool:
    """Whether Fabric's own config files set where logins connect (``port``, ``gateway``,
    ``ssh_config_path``): Fabric's `Config` reads them for every connection, and the inventory
    does not see them. Conservative: a Python config file, an unreadable or unparsable one
    counts."""
    import yaml

    for prefix in _FABRIC:
        for suffix in ("yaml", "yml", "json", "py"):
            file = Path(prefix + suffix).expanduser()
            try:
                text = file.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                continue
            except OSError:
                return True
            if suffix == "py":  # Python: anything may be set
                return True
            try:
                data = json.loads(text) if suffix == "json" else yaml.safe_load(text)
            except (ValueError, yaml.YAMLError):
                return True
            if not isinstance(data, dict | None) or _FABRIC_MOVING & set(data or {}):
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
