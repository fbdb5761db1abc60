"""Throwaway OpenSSH daemons on loopback: the hosts that integration tests, the demo and the
benchmark deploy to.

Real ``sshd`` rather than a paramiko server stub, so that exec, SFTP, host-key checks and
authentication behave exactly as on a production host. Each daemon runs in the foreground
(``-D -e``) from its own directory with an absolute-path config, a fresh ed25519 host key and a
port chosen by the kernel; one client key pair and one ``known_hosts`` file serve every host
of a sandbox, so a single inventory reaches them all. Nothing here reads ``~/.ssh``.

Processes never outlive the sandbox: `SshdSandbox.close` (also run by ``with``, and by
``atexit`` as a safety net) kills every daemon, every session it forked and every process
started through it, even one detached with ``setsid nohup`` (found by a marker variable that
sshd puts into each session's environment). When ``setpriv`` exists, a daemon also gets
SIGTERM if the thread that started it dies (``PR_SET_PDEATHSIG``), which covers a test runner
killed with SIGKILL; start sandboxes from a thread that outlives them (normally the main one).

Preparing a daemon (the binary, keys, ports, its config) is `deploy.sandbox.sshd_setup`;
finding and killing the processes is `deploy.sandbox.reaper`.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from deploy.sandbox.ports import pick_ports
from deploy.sandbox.reaper import MARKER_VAR, POLL, STOP_TIMEOUT, SurvivedKill, doomed, kill_trees
from deploy.sandbox.sshd_setup import (
    CONFIG,
    SandboxError,
    find_sshd,
    keygen,
    plain,
)

READY_TIMEOUT = 10.0
_PORT_ATTEMPTS = 5
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RESERVED = {"known_hosts", "client_ed25519", "client_ed25519.pub"}


def _kill(roots: set[int], tokens: set[str]) -> None:
    """`kill_trees`, its failure worded as the sandbox's own."""
    try:
        kill_trees(roots, tokens)
    except SurvivedKill as exc:
        raise SandboxError(str(exc)) from exc


@dataclass
class SshHost:
    """One running sshd and the files a client needs to reach it.

    ``root`` stands for the host's filesystem: tests put target files under it (the daemon
    itself serves the whole real filesystem, as the real user). ``state_dir`` is the deploy
    state directory the inventory points at; it is not created, as a first run finds it missing.
    """

    name: str
    address: str
    port: int
    user: str
    identity_file: Path
    known_hosts: Path
    root: Path
    state_dir: Path
    workdir: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)
    _sshd: str = field(default="/usr/sbin/sshd", repr=False)
    #: sshd's SFTP ``Subsystem``: "internal-sftp", or an sftp-server path (see `SshdSandbox`).
    sftp: str = field(default="internal-sftp", repr=False)
    _token: str = field(default_factory=lambda: secrets.token_hex(8), repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    _log_offset: int = field(default=0, repr=False)

    @property
    def host_key(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    @property
    def log_file(self) -> Path:
        return self.workdir / "sshd.log"

    def host_key_line(self) -> str:
        """The current key as a known_hosts line: ``[127.0.0.1]:PORT ssh-ed25519 AAAA...``."""
        key_type, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {key_type} {blob}"

    def inventory_entry(self, **extra: Any) -> dict[str, Any]:
        """This host as a ``hosts.yaml`` entry; ``extra`` become host vars beside ``root``."""
        return {
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "identity_file": str(self.identity_file),
            "known_hosts": str(self.known_hosts),
            "state_dir": str(self.state_dir),
            "vars": {"root": str(self.root), **extra},
        }

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_text(self) -> str:
        """What sshd wrote to stderr, over all restarts: LogLevel INFO, ~3 lines a login, and
        2 per start from the readiness probe (see `_dial`)."""
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def processes(self) -> set[int]:
        """Live pids of the daemon, its sessions and everything started through it."""
        return doomed({self._process.pid} if self._process else set(), {self._token})[0]

    def stop(self) -> None:
        """Kill the daemon, its sessions and every process started through it; idempotent."""
        _stop([self])

    def restart(self, new_host_key: bool = False, timeout: float = READY_TIMEOUT) -> None:
        """Stop and start the daemon on the same port, optionally with a fresh host key.

        The shared known_hosts keeps the old key, so after ``new_host_key=True`` clients that
        check it must refuse the host (the changed-key case); `host_key_line` gives the new
        one. Open sessions are closed (unlike ``systemctl restart ssh``); processes detached
        from them keep running.

        Raises:
            SandboxError: the daemon did not come back (e.g. the port was taken meanwhile).
        """
        if self._process is not None:
            _kill({self._process.pid}, set())
            self._reap()
        if new_host_key:
            keygen([self.host_key], f"sandbox-{self.name}")
        self._launch()
        _await_ready([self], time.monotonic() + timeout, may_move=False)

    def _launch(self) -> None:
        """Start sshd with stderr appended to the log; `_await_ready` then polls it."""
        setenv = {MARKER_VAR: self._token, "DEPLOY_SANDBOX_ROOT": str(self.root), **self.env}
        config = self.workdir / "sshd_config"
        config.write_text(
            CONFIG.format(
                port=self.port,
                sftp=plain(self.sftp),
                workdir=plain(str(self.workdir)),
                setenv=" ".join(f'"{plain(f"{key}={value}")}"' for key, value in setenv.items()),
            )
        )
        argv = [self._sshd, "-D", "-e", "-f", str(config)]
        if setpriv := shutil.which("setpriv"):
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        with open(self.log_file, "ab") as log:
            self._log_offset = log.tell()
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to handle, not sshd's
            )

    def _new_log(self) -> str:
        """What sshd logged since the latest launch."""
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def _reap(self) -> None:
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=STOP_TIMEOUT)
            self._process.kill()  # a no-op if it has exited
            self._process.wait()

    def _dial(self, timeout: float) -> socket.socket | None:
        """A connection to our sshd once it logged that it listens, to read the banner from.

        The log line proves that *our* process bound the port (not another daemon that took
        it meanwhile); the banner (read in `_await_ready`) proves it accepts. The probe hangs
        up without sending its own banner: sshd then gives up before forking its pre-auth
        child, which would be orphaned and linger as a zombie until init reaps it (as after
        any client that hangs up pre-auth). The price is two log lines per start:
        "kex_exchange_identification: Connection closed by remote host" and "Connection
        closed by 127.0.0.1 port N".
        """
        if f"listening on 127.0.0.1 port {self.port}." not in self._new_log():
            return None
        try:
            return socket.create_connection((self.address, self.port), timeout=timeout)
        except OSError:
            return None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def _await_ready(
    hosts: list[SshHost], deadline: float, *, may_move: bool, avoid: frozenset[int] = frozenset()
) -> None:
    """Poll every launched daemon until it serves a banner, all in one loop.

    A daemon that exits because its port was taken between `_pick_ports` and its bind is
    relaunched on a new port (``may_move``; not on restart, whose port is part of the test).

    Raises:
        SandboxError: a daemon exited or missed the deadline; names it, with its log tail.
    """
    pending = list(hosts)
    moves = dict.fromkeys([h.name for h in hosts], 0)
    while pending:
        dialled: list[tuple[SshHost, socket.socket]] = []
        for host in pending:
            assert host._process is not None
            if host._process.poll() is None:
                conn = host._dial(max(0.05, min(1.0, deadline - time.monotonic())))
                dialled += [(host, conn)] if conn else []
                continue
            log = host._new_log()
            if may_move and "Address already in use" in log and moves[host.name] < _PORT_ATTEMPTS:
                moves[host.name] += 1
                host.port = pick_ports(1, avoid | {h.port for h in hosts})[0]
                host._launch()
                continue
            for _, conn in dialled:
                conn.close()
            raise SandboxError(
                f"sshd for {host.name} on port {host.port} exited with status "
                f"{host._process.returncode}:\n{_tail(log)}"
            )
        for host, conn in dialled:  # every daemon forks for its probe at once: read after
            with conn, contextlib.suppress(OSError):
                if conn.recv(256).startswith(b"SSH-2.0"):
                    pending.remove(host)
        if pending and time.monotonic() > deadline:
            names = ", ".join(f"{h.name}:{h.port}" for h in pending)
            raise SandboxError(f"sshd not ready in time ({names}):\n{_tail(pending[0]._new_log())}")
        time.sleep(POLL if pending else 0)


def _stop(hosts: list[SshHost]) -> None:
    """Stop several hosts in one sweep: one /proc scan per round, not one per host."""
    try:
        _kill({h._process.pid for h in hosts if h._process}, {h._token for h in hosts})
    finally:
        for host in hosts:
            host._reap()


class SshdSandbox:
    """Some sshd daemons under one directory, sharing a client key and a known_hosts file.

    Layout: ``base/client_ed25519{,.pub}``, ``base/known_hosts``, and per host ``base/NAME/``
    (sshd_config, host key, authorized_keys, sshd.log) with ``base/NAME/root/`` as its
    filesystem area. Use as a context manager; `close` is idempotent and also registered with
    ``atexit``. known_hosts is emptied on creation: a sandbox trusts only its own hosts.
    """

    def __init__(self, base: Path, *, sftp: str = "internal-sftp") -> None:
        """``sftp``: sshd's SFTP subsystem. The default serves SFTP inside sshd; a stock host
        runs ``/usr/lib/openssh/sftp-server`` through the user's login shell, which the
        benchmark can choose to measure what that shell costs (``python -m bench --sftp``)."""
        self.base = Path(base).absolute()
        self.sftp = sftp
        self.hosts: dict[str, SshHost] = {}
        self.sshd = find_sshd()
        try:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        except PermissionError as exc:
            raise SandboxError(f"cannot create /run/sshd (run as root): {exc}") from exc
        self.base.mkdir(parents=True, exist_ok=True)
        self.identity_file = self.base / "client_ed25519"
        if not self.identity_file.exists():
            keygen([self.identity_file], "deploy-sandbox-client")
        self.known_hosts = self.base / "known_hosts"
        self.known_hosts.write_text("")
        self._used_ports: set[int] = set()
        self._closed = False
        atexit.register(self.close)

    def __enter__(self) -> SshdSandbox:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self, name: str, *, env: dict[str, str] | None = None) -> SshHost:
        """Start one daemon; see `start_many`."""
        return self.start_many([name], env=env)[0]

    def start_many(
        self, names: list[str], *, env: dict[str, str] | None = None, timeout: float = READY_TIMEOUT
    ) -> list[SshHost]:
        """Start one daemon per name: every key and process first, then wait for all at once.

        ``env`` is added to every session's environment (sshd ``SetEnv``). The hosts' key lines
        are appended to the shared known_hosts once all of them answer.

        Raises:
            SandboxError: a bad or duplicate name, or a daemon that did not come up (the
                daemons of this call are stopped again before it is raised).
        """
        if self._closed:
            raise SandboxError("this sandbox is closed")
        for name in names:
            if not _NAME.fullmatch(name) or name in _RESERVED or name in self.hosts:
                raise SandboxError(f"bad host name, or one already started: {name!r}")
        if len(set(names)) != len(names):
            raise SandboxError(f"duplicate host names in {names}")
        pub_key = self.identity_file.with_suffix(".pub").read_text()
        hosts = []
        for name, port in zip(names, pick_ports(len(names), self._used_ports), strict=True):
            workdir = self.base / name
            (workdir / "root").mkdir(parents=True, exist_ok=True)
            (workdir / "authorized_keys").write_text(pub_key)
            hosts.append(
                SshHost(
                    name=name,
                    address="127.0.0.1",
                    port=port,
                    user=getpass.getuser(),
                    identity_file=self.identity_file,
                    known_hosts=self.known_hosts,
                    root=workdir / "root",
                    state_dir=workdir / "root/var/lib/deploy",
                    workdir=workdir,
                    env=dict(env or {}),
                    _sshd=self.sshd,
                    sftp=self.sftp,
                )
            )
        keygen([h.host_key for h in hosts], "deploy-sandbox-host")
        try:
            for host in hosts:
                self.hosts[host.name] = host
                host._launch()
            deadline = time.monotonic() + timeout
            _await_ready(hosts, deadline, may_move=True, avoid=frozenset(self._used_ports))
        except BaseException:
            _stop(hosts)
            for host in hosts:
                self.hosts.pop(host.name, None)
            raise
        self._used_ports.update(h.port for h in hosts)  # never reused: known_hosts names them
        with open(self.known_hosts, "a") as known:
            known.writelines(h.host_key_line() + "\n" for h in hosts)
        return hosts

    def write_inventory(
        self,
        path: Path,
        hosts: list[SshHost],
        *,
        groups: dict[str, list[str]] | None = None,
        vars: dict[str, Any] | None = None,
        host_vars: dict[str, dict[str, Any]] | None = None,
    ) -> Path:
        """Write a ``hosts.yaml`` reaching ``hosts``: ``{hosts: {name: entry}, groups, vars}``."""
        per_host = host_vars or {}
        document = {
            "hosts": {h.name: h.inventory_entry(**per_host.get(h.name, {})) for h in hosts},
            "groups": dict(groups or {}),
            "vars": dict(vars or {}),
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def close(self) -> None:
        """Stop every daemon and everything started through them; safe to call twice."""
        if not self._closed:
            self._closed = True
            atexit.unregister(self.close)
            _stop(list(self.hosts.values()))
