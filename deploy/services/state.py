"""What runs for a service right now: the facts a restart derives from and an undo restores."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from deploy.edits.cmdline import masked_argv

#: The rule `deploy.hostpy.agent.start` follows, for docs/operations.md.
RUN_AS_RULE = """
A server deploy starts in place of a running one (the restart, the automatic rollback's
restart of the old server, ``deploy rollback``) runs as the user the replaced server ran as:
its real uid, real gid and supplementary groups, read from ``/proc/PID/status`` (``Uid:``,
``Gid:``, ``Groups:``) when it was found, kept in the run's journal beside its argv, environment
and cwd, and shown in the plan (``start as ml (uid 1234, gid 1234, groups 44,1234)``) and in the
report (the restart's summary, its ``uid`` and ``gid`` figures). The process helper, as root,
sets exactly those groups, gid and uid in the child before it runs the server; a server that
ran as root starts as root. A journal record written before users were kept starts the old
server as the helper runs (root), as it did then. With no server to copy from (no server
running, or a ``start`` step) the service's ``command`` starts as the helper runs (a service's
``user`` names whose running server may be adopted; it does not change whom ``command`` starts
as). A helper that is not root (a non-root login without ``become``) cannot
switch users: unless it already is that user, the restart is refused in one line before
anything is stopped, and a start is refused rather than run as another user.

The server's log (``state_dir/services/NAME.log``) is opened by the helper in deploy's own
directory (0700) and handed to the server as its stdout and stderr, so the server needs no
right to the file, and no root-owned file is created in the user's directories (where that user
could swap it for a link). The pid file, the port-owner check (``/proc/net/tcp`` matched to the
server's sockets), the health polls and the stop work the same for a server of any user.
"""


@dataclass
class ServiceState:
    """What runs for a service right now, enough to start exactly that again later."""

    running: bool
    pid: int | None = None
    pgid: int | None = None
    sid: int | None = None
    argv: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: "deploy" (our pid file), "adopted" (a listener someone started by hand), "systemd".
    origin: str = "none"
    #: Process groups of orphans (``sglang::`` children of a dead server) still on the port.
    leftover_pgids: list[int] = field(default_factory=list)
    #: Every ``address:port`` the server listens on (``0.0.0.0:30000``, ``[::]:30000``).
    listen: list[str] = field(default_factory=list)
    #: /proc/PID/exe: the binary the server runs.
    exe: str | None = None
    #: Whom it runs as (/proc/PID/status: real uid, real gid, supplementary groups) and that
    #: user's name. None: not known (systemd, no server, a record from before they were kept),
    #: which starts the server as deploy's helper runs, as it always did.
    uid: int | None = None
    gid: int | None = None
    groups: list[int] = field(default_factory=list)
    user: str | None = None
    #: /proc/PID/cgroup of the server: which systemd unit, container or login session it is in.
    cgroup: str = ""
    #: The helper's own cgroup at the probe (the login deploy runs in), to tell a server a
    #: systemd unit runs from one started in a login (`deploy.services.identity.unit_problem`).
    helper_cgroup: str = ""
    #: /proc/PID/stat's start time (clock ticks after boot): with ``pid``, which process this
    #: is. None: not known (systemd, a record from before it was kept).
    start_time: int | None = None
    #: When it started, as Unix time (from ``start_time`` and the boot time); None: not known.
    started_at: float | None = None

    def same_process(self, pid: int | None, start: int | None) -> bool:
        """Whether this is the process ``pid`` that started at ``start`` (None: not known,
        the pid alone decides)."""
        if not self.running or pid is None or self.pid != pid:
            return False
        return start is None or self.start_time is None or self.start_time == start

    def describe(self) -> str:
        if not self.running:
            return "not running" + (
                " (orphaned children hold the port)" if self.leftover_pgids else ""
            )
        command = " ".join(masked_argv(self.argv))[:160]
        return f"pid {self.pid} ({self.origin})" + (f": {command}" if command else "")

    def run_as(self) -> dict[str, Any] | None:
        """Whom a server started to replace this one runs as (the helper's ``start``'s
        ``user``), or None when that is not known."""
        if self.uid is None or self.gid is None:
            return None
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups), "name": self.user}

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> ServiceState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def describe_user(user: dict[str, Any] | None) -> str:
    """``ml (uid 1234, gid 1234, groups 1234,44)`` for a helper ``user``; "" when unknown."""
    if not user:
        return ""
    uid = user.get("uid")
    name = user.get("name") or f"uid {uid}"
    groups = ",".join(str(group) for group in user.get("groups") or []) or "none"
    return f"{name} (uid {uid}, gid {user.get('gid')}, groups {groups})"


def ids_from_helper(user: Any) -> dict[str, Any]:
    """ServiceState's uid/gid/groups/user from the helper's ``user`` ({} when unreadable)."""
    if not isinstance(user, dict) or user.get("uid") is None or user.get("gid") is None:
        return {}
    return {
        "uid": int(user["uid"]),
        "gid": int(user["gid"]),
        "groups": [int(group) for group in user.get("groups") or []],
        "user": user.get("name"),
    }
