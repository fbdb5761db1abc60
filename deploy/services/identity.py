"""Which processes are a service's server, whose they are, and whether we may act on them.

The process helper's ``probe`` reports every listener on the service's port (with its argv,
environment, cwd, sockets and user) and the process our pid file names; `state_from_probe`
turns that into one `ServiceState`: our own server first, else the listener someone started by
hand ("adopted", the group leader preferred, since children may share the socket), else — when
only a dead server's ``sglang::`` children hold the port — not running, with their process
groups to reap. Pure functions: the manager does the I/O.
"""

from __future__ import annotations

from typing import Any

from deploy.config.services import ServiceSpec
from deploy.edits.cmdline import masked_argv, parse
from deploy.services.state import ServiceState, ids_from_helper

#: Which process is the server (docs/operations.md shows this text).
IDENTITY_RULE = """
Before a restart or stop touches anything (the run's preflight), deploy's process helper lists
every process listening on the service's port, in every address family (``/proc/net/tcp`` and
``tcp6``), and the process of deploy's own pid file (its pid and start time: a pid reused by
another program after the server died or the host rebooted is not it). They must be one
process tree (one session: a server and the ``sglang::`` children it started share it) of one
user; otherwise
the host is not attempted (exit 4) and each tree is named with its pid, user and command line
— another user's program on ``[::1]:PORT`` beside root's server on ``127.0.0.1:PORT`` is never
taken for the server. That user must be the one deploy acts as (the login user, or the become
user) or the one the service names in ``user``: as root, a less-privileged user's process is
never adopted, stopped or restarted unless named. A stop signals only that tree (its process
group and session); a titled process holding the port outside it is never killed. What is
checked in the preflight is checked again right before the stop.

The server is started again only from trusted paths: before the stop, the helper judges what
the restarted server would import from — its interpreter and prefixes, site directories,
``PYTHONPATH`` entries, the cwd (first on ``sys.path`` under ``python -m``) and the script's
directory — by the interpreter rule above, for the user it runs as: each must be owned by root
or that user and writable by nobody else. A root server whose cwd another user owns is refused
(exit 4), naming the path; the helper's ``start`` checks the same again. Not covered yet: the
compile check and the file helper keep their shell implementation of the same rule
(`deploy.checks.interpreter`), and a server started from the service's ``command`` template
(the playbook's own) is not judged.
"""


def helper_ids_of(probe: dict[str, Any]) -> tuple[int, int, int] | None:
    """(euid, uid, gid) of the host-side helper, as its probe reported them."""
    ids = probe.get("helper_ids")
    if isinstance(ids, list) and len(ids) == 3:
        return (int(ids[0]), int(ids[1]), int(ids[2]))
    return None


def state_from_probe(probe: dict[str, Any], prefix: str) -> ServiceState:
    """What runs for the service, from the helper's probe answer."""
    info = probe.get("pid_file_process")
    origin = "deploy"
    listeners = probe.get("listeners") or []
    orphans = [p for p in listeners if prefix and (p.get("cmdline") or [""])[0].startswith(prefix)]
    servers = [p for p in listeners if p not in orphans]
    if not info and servers:
        # Prefer the group leader: children may share the listening socket.
        info, origin = (
            sorted(servers, key=lambda p: (p["pid"] != p["pgid"], p["pid"]))[0],
            "adopted",
        )
    if not info:
        # Only a dead server's orphans hold the port: not running, but they must be reaped.
        return ServiceState(running=False, leftover_pgids=sorted({p["pgid"] for p in orphans}))
    return ServiceState(
        helper_cgroup=str(probe.get("helper_cgroup") or ""),
        running=True,
        pid=info["pid"],
        pgid=info["pgid"],
        sid=info["sid"],
        argv=list(info.get("cmdline") or []),
        cwd=info.get("cwd"),
        env=dict(info.get("env") or {}),
        origin=origin,
        listen=list(info.get("listen") or []),
        exe=info.get("exe"),
        cgroup=str(info.get("cgroup") or ""),
        start_time=info.get("start"),
        started_at=info.get("started_at"),
        **ids_from_helper(info.get("user")),
    )


def _user_of(proc: dict[str, Any]) -> dict[str, Any]:
    user = proc.get("user")
    return user if isinstance(user, dict) else {}


def _who(proc: dict[str, Any]) -> str:
    user = _user_of(proc)
    argv = " ".join(masked_argv(list(proc.get("cmdline") or [])))[:80]
    return (
        f"pid {proc.get('pid')} ({user.get('name') or '?'}, uid {user.get('uid', '?')}, "
        f"session {proc.get('sid')}: {argv!r})"
    )


def identity_problem(probe: dict[str, Any], named: list[str] | tuple[str, ...] = ()) -> str | None:
    """Why what holds the service's port may not be adopted as the server; None when it may.

    Every listener on the port, in every address family (the helper reads /proc/net/tcp and
    tcp6), and the process our pid file names, must be one process tree (one session: a
    server and its ``sglang::`` children share the one it started) of one user: a second
    tree or user beside it — another user's program on ``[::]:PORT`` next to root's on
    ``127.0.0.1:PORT`` — is refused, each named, before anything is touched. That user must
    be the one the helper acts as (the login or become user) or one ``named`` (names or
    uids: the service's ``user``): as root, a less-privileged user's process is never
    adopted, stopped or restarted unless the playbook names that user.
    """
    procs = [p for p in probe.get("listeners") or [] if p]
    ours = probe.get("pid_file_process")
    if ours and all(p.get("pid") != ours.get("pid") for p in procs):
        procs.append(ours)
    if not procs:
        return None
    trees = {(p.get("sid"), _user_of(p).get("uid")) for p in procs}
    if len(trees) > 1:
        leaders: dict[tuple[Any, Any], dict[str, Any]] = {}
        for proc in sorted(procs, key=lambda p: (p.get("pid") != p.get("pgid"), p.get("pid"))):
            leaders.setdefault((proc.get("sid"), _user_of(proc).get("uid")), proc)
        return (
            "the service's port is held by more than one process tree or user: "
            + "; ".join(_who(p) for p in leaders.values())
            + "; refusing before touching anything (stop the one that is not the server)"
        )
    user = _user_of(procs[0])
    helper = helper_ids_of(probe)
    if user.get("uid") is None:
        return f"cannot tell whom {_who(procs[0])} runs as; refusing to adopt it"
    uid = int(user["uid"])
    if helper is not None and uid == helper[0]:
        return None
    if str(user.get("name")) in named or str(uid) in named:
        return None
    actor = "root" if helper is not None and helper[0] == 0 else f"uid {helper and helper[0]}"
    return (
        f"{_who(procs[0])} holds the service's port as {user.get('name')} (uid {uid}), not as "
        f"{actor}; refusing to adopt another user's process (name it in the service's user: "
        f"{user.get('name')} if it is the server)"
    )


def start_problem(probe: dict[str, Any], prefix: str) -> str | None:
    """Why the server `state_from_probe` picks could not be started again as it runs: a path
    on its import path (cwd, ``PYTHONPATH``, script directory, interpreter and prefix) that a
    user other than root and the one it runs as can change (the helper judges it:
    `deploy.hostpy.agent_trust.start_problem`). Asked before the stop."""
    info = probe.get("pid_file_process")
    if not info:
        listeners = [p for p in probe.get("listeners") or [] if p]
        servers = [
            p
            for p in listeners
            if not (prefix and (p.get("cmdline") or [""])[0].startswith(prefix))
        ]
        servers.sort(key=lambda p: (p["pid"] != p["pgid"], p["pid"]))
        info = servers[0] if servers else None
    if not info or not info.get("start_problem"):
        return None
    return f"restarting pid {info['pid']} as it runs would start it from {info['start_problem']}; refusing before the stop"


def ownership_problem(state: ServiceState, spec: ServiceSpec) -> str | None:
    """Why an adopted listener is not this service's server (its argv lacks ``match``)."""
    if state.origin != "adopted" or spec.match in " ".join(state.argv):
        return None
    return (
        f"port {spec.port} is held by pid {state.pid} "
        f"({' '.join(masked_argv(state.argv))[:120]!r}), which is not "
        f"{spec.match}; not stopping it (use --force if it really is the service)"
    )


def start_refusal(user: dict[str, Any] | None, helper_ids: tuple[int, ...] | None) -> str | None:
    """Why the helper could not start a server as ``user`` (it is not root and not that user);
    None when it can, or when no probe said whom it runs as. The helper's `start` refuses the
    same way (`deploy.hostpy.agent_proc.start_ids`)."""
    from deploy.hostpy.agent_proc import start_ids

    if not user or helper_ids is None:
        return None
    refusal: str | None = start_ids(user, tuple(helper_ids))[1]  # type: ignore[no-untyped-call]
    return refusal


#: cgroup path words that mean a container runtime started the process (``docker-ID.scope``,
#: ``/docker/ID``, ``cri-containerd-ID.scope``, ``libpod-ID.scope``, ``/kubepods/...``).
_CONTAINER_WORDS = (
    ("kubepods", "Kubernetes"),  # first: its pods' containers are containerd's or docker's
    ("docker", "docker"),
    ("containerd", "containerd"),
    ("libpod", "podman"),
    ("podman", "podman"),
    ("lxc.payload", "LXC"),
)


def _cgroup_paths(cgroup: str) -> list[str]:
    """The paths of /proc/PID/cgroup (v2 ``0::/path``; v1 ``N:controllers:/path``)."""
    return [line.split(":", 2)[2] for line in cgroup.splitlines() if line.count(":") >= 2]


def container_of(cgroup: str) -> str | None:
    """The container runtime a process's cgroup names (docker, containerd, podman...), or None."""
    for path in _cgroup_paths(cgroup):
        for word, runtime in _CONTAINER_WORDS:
            if word in path:
                return runtime
    return None


def unit_of(cgroup: str) -> str | None:
    """The systemd system unit a process belongs to (``sglang.service``), or None: a login
    session's scope, a user manager's units (``user@UID.service``) and containers are not
    system units deploy could restart with systemctl."""
    for path in _cgroup_paths(cgroup):
        parts = [part for part in path.split("/") if part]
        if not parts or parts[0] == "user.slice" or container_of(f"0::{path}"):
            continue
        units = [part for part in parts if part.endswith(".service")]
        if units:
            return units[-1]
    return None


def server_unit(state: ServiceState) -> str | None:
    """The system unit that runs the server (`unit_of` its cgroup), or None: none, or the
    unit deploy's own login is in too (a host without pam_systemd keeps a login's processes
    in ``ssh.service``: a server started from one is no unit's)."""
    unit = unit_of(state.cgroup)
    return None if unit is None or unit == unit_of(state.helper_cgroup) else unit


def unit_problem(state: ServiceState, spec: ServiceSpec) -> str | None:
    """Why the ``process`` manager must not stop this server: systemd runs it (its cgroup
    names a system unit that deploy's own login is not in — on a host without pam_systemd a
    login stays in ``ssh.service``, and a server started from it is no unit's), so a signal
    behind systemd's back would be undone by its ``Restart=`` or leave the unit failed."""
    if not state.running or spec.manager != "process":
        return None
    unit = server_unit(state)
    if unit is None:
        return None
    return (
        f"the {spec.match} server on port {spec.port} (pid {state.pid}) is run by the systemd "
        f"unit {unit}; deploy does not signal a unit's process behind systemd's back: set the "
        f"service's manager: systemd and unit: {unit}, or auto (kimi-eagle3: "
        f"sglang_manager=systemd sglang_unit={unit}, or its default auto)"
    )


def unsupported(state: ServiceState, spec: ServiceSpec) -> str | None:
    """Why deploy will not restart this server, in one line, or None: it runs in a container
    (its cgroup, or a ``docker-proxy`` holding the port) or on several nodes (``--nnodes``)."""
    if not state.running:
        return None
    program = (state.argv[0] if state.argv else "").rsplit("/", 1)[-1]
    runtime = "docker" if program == "docker-proxy" else container_of(state.cgroup)
    if runtime is not None:
        return (
            f"the {spec.match} server on port {spec.port} (pid {state.pid}) runs in a {runtime} "
            "container, which deploy does not restart: change the image or the container's "
            "command with its own tooling, or run the server on the host"
        )
    managed = unit_problem(state, spec)
    if managed:
        return managed
    nodes = parse(state.argv, spec.match).values("--nnodes")
    if nodes and nodes[-1].isdigit() and int(nodes[-1]) > 1:
        return (
            f"the {spec.match} server on port {spec.port} (pid {state.pid}) is one of "
            f"{nodes[-1]} nodes (--nnodes {nodes[-1]}), which deploy does not restart: a "
            "multi-node server must be restarted on every node together, by hand"
        )
    return None
