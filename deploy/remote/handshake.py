"""Handshakes ahead of the login: each host's SSH connection negotiated while the command
is still reading its input.

A command pays its start-up (imports, loading and validating the playbook) before it could
connect, and then the connection's round trips before the login: TCP connect, the banners,
the key exchange. On a 100 ms link that is ~0.3 s spent waiting after ~0.3 s spent
computing. `Handshakes` overlaps them: as soon as the hosts a command will contact are known,
one background thread per host makes everything that comes before authentication —
`deploy.remote.connect.negotiate`: TCP connect, banners, key exchange, the host-key check
against known_hosts — while the main thread goes on validating. Nothing that logs in,
writes or asks happens there: the login, every channel, recording a new host key under
``accept-new`` and every prompt happen when the engine opens the host, exactly where they
happened before, after the whole input was found valid (`connect` is the engine's
`deploy.remote.host.Connector`).

So a command whose input turns out bad has made, at most, a TCP connection and a key
exchange with each selected host (sshd logs the connection closed before authentication);
no login, no command. `close` ends every handshake not taken: promptly and quietly.
What a handshake found (refused, no answer, an untrusted key) is raised only when the engine
opens the host, in the same words as a connection made then.

Hosts reached through a ProxyJump or ProxyCommand are not negotiated ahead (that would mean
logging in to the jump host): `negotiate` declines them and they connect as before. Nor
are hosts whose configuration runs something when it is read (`inert`: an ssh_config
``Match exec``, a Fabric config file): a command with bad input runs nothing. Nor is
a handshake used when the host's final settings differ from the ones it was made with.

Imports no SSH library: the command starts handshakes before it has imported paramiko, and
a host whose route ssh_config cannot change (`direct`) is connected to and sent the client's
banner before the thread imports the SSH stack (`Dial`): the round trips of the connect and
of the server's KEXINIT overlap that import.
"""

from __future__ import annotations

import glob
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from deploy import ablation, trace
from deploy.remote.dial import Dial
from deploy.remote.settings import ConnectSettings

if TYPE_CHECKING:
    from deploy.remote.early import Negotiated
    from deploy.remote.transport import Transport


#: ssh_config keywords that can send a connection elsewhere than the inventory's address and
#: port (or through another host): with any of them in effect, the route is only known once
#: ssh_config is read the way Fabric reads it.
ROUTING = frozenset(
    {
        "hostname",
        "port",
        "proxyjump",
        "proxycommand",
        "match",
        "canonicalizehostname",
        "canonicaldomains",
    }
)
#: Fabric's own config files, which could set an ssh_config path, a port or a gateway.
_FABRIC_FILES = tuple(
    f"{prefix}.{suffix}"
    for prefix in ("/etc/fabric", "~/.fabric")
    for suffix in ("yaml", "yml", "json", "py")
)


#: What separates an ssh_config keyword from its value: paramiko's ``\s*=\s*|\s+`` (a tab
#: too), read as "the first run of whitespace and ``=``".
_SEPARATOR = re.compile(r"[\s=]+")


def _keyword(line: str) -> tuple[str, str]:
    """An ssh_config line's keyword (lower case) and the rest, split as paramiko splits them."""
    keyword, *rest = _SEPARATOR.split(line, maxsplit=1)
    return keyword.lower(), rest[0] if rest else ""


def _uses(path: Path, wanted: Callable[[str, str], bool], depth: int = 0) -> bool:
    """Whether a line of the ssh_config file ``path`` (or of what it includes) is ``wanted``
    (given its keyword and the rest).

    Read conservatively: a line anywhere counts, whichever ``Host`` block it is in, and
    ``Include`` is followed (OpenSSH does; paramiko does not, so this errs on the safe side).
    An unreadable file counts as wanted.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, rest = _keyword(line)
        if wanted(keyword, rest):
            return True
        if keyword == "include":
            if depth > 8:
                return True
            for pattern in rest.split():
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):
                    pattern = str(path.parent / pattern)
                if any(
                    _uses(Path(found), wanted, depth + 1) for found in sorted(glob.glob(pattern))
                ):
                    return True
    return False


def _ssh_configs(settings: ConnectSettings) -> list[Path]:
    """The ssh_config files Fabric reads for the host."""
    names = (
        [settings.ssh_config] if settings.ssh_config else ["~/.ssh/config", "/etc/ssh/ssh_config"]
    )
    return [Path(name).expanduser() for name in names]


def _fabric_config() -> bool:
    return any(os.path.exists(os.path.expanduser(name)) for name in _FABRIC_FILES)


def direct(settings: ConnectSettings) -> bool:
    """Whether the host is reached at exactly its ``address`` and ``port`` (default 22): no
    ssh_config Fabric reads can reroute it (`ROUTING`), and no Fabric config file exists."""
    if _fabric_config():
        return False
    return not any(_uses(path, lambda k, _: k in ROUTING) for path in _ssh_configs(settings))


#: A ``Match`` line's ``exec`` criterion (``!exec`` too): paramiko runs its command.
_EXEC = re.compile(r"\bexec\b", re.IGNORECASE)


def inert(settings: ConnectSettings) -> bool:
    """Whether reading the host's configuration the way Fabric does, for a handshake ahead,
    runs nothing: no ssh_config ``Match exec`` (paramiko runs the command to decide the
    route) and no Fabric config file (a ``.py`` one is executed; any may name another
    ssh_config). A handshake runs before the input is known to be valid, and a command with
    bad input runs nothing: such a host is reached only at the login, as before.
    """
    if _fabric_config():
        return False
    return not any(
        _uses(path, lambda k, rest: k == "match" and _EXEC.search(rest) is not None)
        for path in _ssh_configs(settings)
    )


@dataclass
class _Pending:
    settings: ConnectSettings
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The handshake once `negotiate` made it (under way or done), to close from outside.
    early: Negotiated | None = None
    result: Negotiated | None = None
    done: bool = False
    #: Nobody will take the result (`close`, or `take` gave up waiting): close it on arrival.
    abandoned: bool = False

    def hold(self, early: Negotiated) -> None:
        with self.lock:
            self.early = early
        if self.abandoned:
            early.close()

    def finish(self, result: Negotiated | None) -> None:
        with self.lock:
            self.result, self.done = result, True
            drop = self.abandoned
        if drop and result is not None:
            result.close()
        if result is None and self.early is not None:
            self.early.close()  # declined, cancelled, or a bug in the shortcut: nothing kept

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            early, self.result = self.early if not self.done else self.result, None
        if early is not None:
            early.close()


class Handshakes:
    """One command's handshakes ahead of the login, one per host, taken when it connects.

    Lifecycle: `start` when the hosts are known (a daemon thread per host); the engine opens
    each host through `connect`, which waits for that host's handshake and logs in over it;
    `close` (bad input, or the command's end; also the ``with`` block's end) closes every
    handshake not taken. Thread-safe: hosts connect from their own threads.
    """

    def __init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}

    def __enter__(self) -> Handshakes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, hosts: Iterable[ConnectSettings]) -> None:
        """Begin the handshake of every host given (once per host name)."""
        if ablation.off("handshake"):
            return
        for settings in hosts:
            with self._lock:
                if self._cancelled.is_set() or settings.name in self._pending:
                    continue
                pending = _Pending(settings)
                pending.thread = threading.Thread(
                    target=self._negotiate,
                    args=(pending,),
                    name=f"handshake-{settings.name}",
                    daemon=True,  # never holds the process: one blocked in DNS is left behind
                )
                self._pending[settings.name] = pending
                pending.thread.start()

    def _negotiate(self, pending: _Pending) -> None:
        result: Negotiated | None = None
        dial: Dial | None = None
        try:
            with trace.span("ssh.handshake", pending.settings.name):
                if self._cancelled.is_set() or not inert(pending.settings):
                    return
                dial = Dial(pending.settings) if direct(pending.settings) else None
                from deploy.remote.early import negotiate

                result = negotiate(pending.settings, self._cancelled, pending.hold, dial)
        except Exception:  # a shortcut only: the login, made as before, reports any error
            result = None
        finally:
            if dial is not None:
                dial.close()
            pending.finish(result)

    def take(self, settings: ConnectSettings) -> Negotiated | None:
        """The handshake made for ``settings``' host, once finished (None: none was made).

        Waits for it: at most what its own timeouts allow (connect, then banner and key
        exchange), after which the connection is made afresh. Each is taken once.
        """
        with self._lock:
            pending = self._pending.pop(settings.name, None)
        if pending is None or pending.thread is None:
            return None
        pending.thread.join(3 * settings.connect_timeout + 1)
        with pending.lock:
            if pending.done:
                return pending.result
        pending.abandon()
        return None

    def connect(self, settings: ConnectSettings) -> Transport:
        """The `deploy.remote.host.Connector` that logs in over the host's handshake."""
        from deploy.remote.connect import open_connection
        from deploy.remote.ssh import SshTransport

        return SshTransport(open_connection(settings, self.take(settings)))

    def close(self, wait: float = 0.5) -> None:
        """Cancel and close every handshake not taken; wait up to ``wait`` s for the threads.

        A thread still importing the SSH stack or blocked in a DNS lookup is not waited for
        beyond ``wait`` (a daemon thread: it cannot hold the process, and it closes what it
        makes as soon as it sees the cancellation).
        """
        self._cancelled.set()
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for item in pending:
            item.abandon()
        deadline = time.monotonic() + wait
        for item in pending:
            if item.thread is not None:
                item.thread.join(max(0.0, deadline - time.monotonic()))
