"""``deploy status``: what each host's state directory says, read without taking its lock.

Per host: who holds the lock (run id, user, since), the last run kept on the host and how it
ended, any run a crash left unfinished (the next ``apply`` or ``rollback`` undoes it), and the
service's health (filled in by a probe; "-" until one is given).

Taking the lock to look would make a concurrent ``deploy apply`` see the host as busy and
skip it, so status never does: one exec reads the lock holder's description, asks the kernel
whether the lock is held (``/proc/locks``, matched by the lock file's inode), and prints every
run's state records with the same reader the lock uses (``deploy/hostsh/scan.sh``),
folded into states by the same code the engine decides with (`deploy.statedir.runs`). Runs that changed nothing leave no journal, so
"last run" means the last run that changed something on the host.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from deploy import hostsh
from deploy.config.inventory import HostSpec
from deploy.engine.run_options import HostOpener, ssh_host
from deploy.errors import EXIT_NOT_ATTEMPTED, EXIT_OK, DeployError
from deploy.remote.api import Host
from deploy.remote.lock import describe_holder
from deploy.statedir.layout import parse_scan
from deploy.statedir.runs import RunState, ordered


def status_script(state_dir: str) -> str:
    """The status exec: ``deploy/hostsh/status.sh`` after state_dir's quoted assignment."""
    return hostsh.program("status.sh", {"_dS": state_dir})


#: A service health probe: (open host, its name, its settings) -> one short word or line.
HealthProbe = Callable[[Host, str, HostSpec], str]


@dataclass
class HostRun:
    """One run kept on a host, as its journal's first and last lines describe it."""

    run_id: str
    #: changed | rolled back | rollback incomplete | undo failed | resolved | unfinished |
    #: running | damaged
    state: str
    playbook: str = ""
    user: str = ""
    since: str = ""


@dataclass
class HostStatus:
    host: str
    reachable: bool = True
    error: str | None = None
    #: "held", "free", "stale" (the holder died mid-run) or "unknown".
    lock: str = "free"
    lock_holder: dict[str, Any] | None = None
    last_run: HostRun | None = None
    unfinished: list[HostRun] = field(default_factory=list)
    health: str = "-"

    def describe_lock(self) -> str:
        holder = self.lock_holder or {}
        if self.lock == "held":
            return f"held by {describe_holder(holder)}"
        if self.lock == "stale":
            return (
                f"free; its last holder, run {holder.get('run_id', '?')} "
                f"(pid {holder.get('pid', '?')}), died mid-run"
            )
        return self.lock

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json_line(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def parse(name: str, output: str) -> HostStatus:
    """Turn the status script's output into a `HostStatus` (pure, for tests)."""
    status = HostStatus(host=name)
    held = False
    scan: list[str] = []
    for line in output.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "NOSTATE":
            return status  # nothing ever ran here
        if kind == "LOCK":
            pid, _, text = rest.partition("\t")
            status.lock_holder = _json_line(text) or None
            held = pid not in ("0", "unknown", "")
            status.lock = "held" if held else ("unknown" if pid == "unknown" else "free")
        elif kind != "END":
            scan.append(line)
    holder_run = (status.lock_holder or {}).get("run_id")
    runs = []
    for info in ordered(parse_scan(scan)):
        state = "damaged" if info.damaged else str(info.state)
        if info.state is RunState.UNFINISHED and held and holder_run == info.run_id:
            state = "running"
        runs.append(
            HostRun(
                run_id=info.run_id,
                state=state,
                playbook=info.playbook,
                user=info.user,
                since=info.started,
            )
        )
    status.last_run = runs[-1] if runs else None
    open_states = ("unfinished", str(RunState.UNDOING), str(RunState.UNDO_FAILED))
    status.unfinished = [r for r in runs if r.state in open_states]
    if status.lock == "free" and any(r.run_id == holder_run for r in status.unfinished):
        status.lock = "stale"
    return status


def host_status(
    name: str,
    spec: HostSpec,
    *,
    accept_new: bool = False,
    health: HealthProbe | None = None,
    open_host: HostOpener = ssh_host,
) -> HostStatus:
    """Look at one host; an unreachable host is reported, never raised."""
    remote = open_host(name, spec, accept_new)
    try:
        remote.open()
        script = status_script(spec.state_dir)
        result = remote.run(script, timeout=60)
        if not result.ok or "END" not in result.stdout.splitlines():
            why = "timed out" if result.timed_out else f"exit {result.exit_status}"
            return HostStatus(
                host=name,
                error=f"cannot read {spec.state_dir} ({why}): {result.tail(2)}",
                lock="unknown",
            )
        status = parse(name, result.stdout)
        if health is not None:
            status.health = health(remote, name, spec)
        return status
    except DeployError as exc:
        return HostStatus(host=name, reachable=False, error=str(exc), lock="unknown")
    finally:
        remote.close()


def fleet_status(
    hosts: list[tuple[str, HostSpec]],
    *,
    forks: int = 10,
    accept_new: bool = False,
    health: HealthProbe | None = None,
    open_host: HostOpener = ssh_host,
) -> list[HostStatus]:
    """`host_status` for every host, in parallel, in inventory order."""

    def one(item: tuple[str, HostSpec]) -> HostStatus:
        return host_status(
            item[0], item[1], accept_new=accept_new, health=health, open_host=open_host
        )

    if len(hosts) <= 1:
        return [one(item) for item in hosts]
    with ThreadPoolExecutor(max_workers=min(forks, len(hosts))) as pool:
        return list(pool.map(one, hosts))


def exit_code(statuses: list[HostStatus]) -> int:
    """4 when some host could not be looked at, else 0 (status changes nothing)."""
    return EXIT_NOT_ATTEMPTED if any(s.error for s in statuses) else EXIT_OK


def sglang_health(remote: Host, name: str, spec: HostSpec) -> str:
    """The SGLang server's health: ``/health`` through the SSH connection, where it listens.

    The port is the host's ``sglang_port`` variable (default 30000, SGLang's own default), the
    same variable the kimi-eagle3 playbook uses. Asked on loopback first (one forwarded
    request, no exec: a server on a wildcard or 127.0.0.1); refused there, one exec reads the
    host's listening sockets and asks where a server bound to one address (``--host
    10.0.0.5``) listens, so such a server is not reported as down. ``/health`` wants no key.
    """
    from deploy.remote.http import ServerUnavailable
    from deploy.services.endpoint import Endpoint, listen_address, listening

    raw = spec.vars.get("sglang_port", 30000)
    try:
        port = int(raw)
    except (TypeError, ValueError):
        return f"sglang: port {raw!r} is a template; not probed"
    where = str(port)
    try:
        response = remote.http("127.0.0.1", port, "GET", "/health", timeout=10)
    except ServerUnavailable:
        tables = remote.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", timeout=10).stdout
        address = listen_address(listening(tables), port)
        if address is None or address == "127.0.0.1":
            return f"sglang: nothing listening on {port}"
        where = Endpoint(address, port).where()
        try:
            response = remote.http(address, port, "GET", "/health", timeout=10)
        except ServerUnavailable:
            return f"sglang: nothing answering on {where}"
    if response.status == 200:
        return f"sglang: healthy on {where}"
    return f"sglang: HTTP {response.status} on {where} (starting or draining)"
