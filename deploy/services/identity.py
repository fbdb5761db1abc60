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
        **ids_from_helper(info.get("user")),
    )


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
    same way (`deploy.remote.agent_proc.start_ids`)."""
    from deploy.remote.agent_proc import start_ids

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


def unit_problem(state: ServiceState, spec: ServiceSpec) -> str | None:
    """Why the ``process`` manager must not stop this server: systemd runs it (its cgroup
    names a system unit that deploy's own login is not in — on a host without pam_systemd a
    login stays in ``ssh.service``, and a server started from it is no unit's), so a signal
    behind systemd's back would be undone by its ``Restart=`` or leave the unit failed."""
    if not state.running or spec.manager != "process":
        return None
    unit = unit_of(state.cgroup)
    if unit is None or unit == unit_of(state.helper_cgroup):
        return None
    return (
        f"the {spec.match} server on port {spec.port} (pid {state.pid}) is run by the systemd "
        f"unit {unit}; deploy does not signal a unit's process behind systemd's back: set the "
        f"service's manager: systemd and unit: {unit}"
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
