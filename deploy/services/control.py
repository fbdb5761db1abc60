"""Controlling one service on one host: find it, stop it cleanly, start it.

Used by the service steps and by undo. The manager (`deploy.services.managers`) does the
finding, stopping and starting; this adds what is the same for every manager: refusing a
stranger on the port, the GPU release wait after a stop, the server's log.

What "stopped" means here is what SGLang needs (DESIGN.md): the whole process group got SIGTERM
then SIGKILL, orphaned ``sglang::`` children are reaped, the port is free, and — when the service
names its GPUs — nvidia-smi shows them released. A stale listener or a GPU still held would
only fail the new server after its full model load, many minutes later.
"""

from __future__ import annotations

from typing import Any

from deploy.config.services import ServiceSpec
from deploy.errors import ServerRefused, StepFailed
from deploy.remote.api import Host
from deploy.services import identity
from deploy.services.endpoint import Endpoint
from deploy.services.gpus import wait_gpus_released
from deploy.services.helper import AGENT_SOURCE
from deploy.services.managers import Manager, ProcessManager, SystemdManager
from deploy.services.state import ServiceState
from deploy.statedir.layout import Layout

__all__ = ["AGENT_SOURCE", "ServiceControl", "ServiceState"]


class ServiceControl:
    """One service on one host, for one run."""

    def __init__(self, remote: Host, state_dir: str, name: str, spec: ServiceSpec) -> None:
        self.remote = remote
        self.state_dir = state_dir
        self.name = name
        self.spec = spec
        base = Layout(state_dir).services
        self.log_file = f"{base}/{name}.log"
        self.pid_file = f"{base}/{name}.pid"
        #: The helper's view of processes (listeners, pid file, the interpreter's imports):
        #: the process manager itself, and the finder of any manager's server process.
        self.process = ProcessManager(remote, spec, name, self.log_file, self.pid_file)
        self.manager: Manager = (
            SystemdManager(remote, spec) if spec.manager == "systemd" else self.process
        )
        #: Where probes go and the key they send (`deploy.services.endpoint`): the service's
        #: ``address`` and ``api_key`` until a server's own sockets and flags are known.
        self.endpoint = Endpoint(spec.address, spec.port, spec.api_key or None)
        #: The GPU driver nvidia-smi reported during the last GPU release wait (or none).
        self.driver: list[str] = []

    def needs_detection(self) -> bool:
        """Whether the manager is still to be told by the server's cgroup (``auto``, or
        ``systemd`` without a unit)."""
        return self.spec.manager == "auto" or (
            self.spec.manager == "systemd" and not self.spec.unit
        )

    def detect_unit(self) -> str | None:
        """The system unit the server on the port belongs to (its /proc/PID/cgroup, read by
        the process helper's probe), or None: no server, or one not run by a unit."""
        return identity.server_unit(self.process.current())

    def use_unit(self, unit: str | None) -> None:
        """Settle the manager from `detect_unit`'s answer: a unit's server is systemd's (the
        spec becomes ``manager: systemd, unit: UNIT`` — what the journal keeps for the undo),
        anything else the process manager's.

        Raises:
            ServerRefused: ``manager: systemd`` without a unit and no unit runs the server.
        """
        if unit is None and self.spec.manager == "systemd":
            raise ServerRefused(
                f"{self.remote.name}: {self.name}: manager systemd names no unit and the server "
                f"on port {self.spec.port} belongs to none; name it (kimi-eagle3: sglang_unit)"
            )
        if unit is None:
            self.spec = self.spec.model_copy(update={"manager": "process"})
            self.process.spec = self.spec
            self.manager = self.process
            return
        self.spec = self.spec.model_copy(update={"manager": "systemd", "unit": unit})
        self.process.spec = self.spec
        self.manager = SystemdManager(self.remote, self.spec)

    @property
    def helper_ids(self) -> tuple[int, ...] | None:
        """(euid, uid, gid) of the host-side helper, from the last probe."""
        return self.process.helper_ids

    @helper_ids.setter
    def helper_ids(self, ids: list[int] | tuple[int, ...] | None) -> None:
        self.process.helper_ids = tuple(ids) if ids is not None else None

    # -- state ---------------------------------------------------------------------------------

    def current(self) -> ServiceState:
        """What runs now: our own server (pid file), else whatever listens on the port. A
        unit's server (systemd's view has only its pid) gets where it listens, its command
        line and environment from the process helper's view of the port: its address and
        API key, which the baseline, the drain and the undo's wait ask it with."""
        state = self.manager.current()
        if state.running and self.manager is not self.process:
            seen = identity.state_from_probe(self.process.probe(), self.spec.process_prefix)
            if seen.running:
                state.listen, state.argv, state.env = seen.listen, seen.argv, seen.env
        return state

    def resolve_imports(
        self, imports: dict[str, str], fallback: dict[str, Any]
    ) -> tuple[ServiceState, dict[str, Any]]:
        """What runs, and where its own interpreter finds each module (the helper's ``probe``),
        in one round trip; with no server, ``fallback``'s python, env and cwd are used."""
        probe = self.process.probe(imports=imports, fallback=fallback)
        return (
            identity.state_from_probe(probe, self.spec.process_prefix),
            dict(probe.get("imports") or {}),
        )

    def identity_problem(self, *, restart: bool) -> str | None:
        """Why the last probe's holder of the port may not be adopted, stopped or (with
        ``restart``) started again as it runs (`deploy.services.identity`); None when it may.
        For a unit's server, the unit's ``User=`` names its user too (systemd, not deploy,
        starts it again, as that user)."""
        probe = self.process.last_probe
        if probe is None or self.spec.manager == "auto":
            return None
        named = [self.spec.user] if self.spec.user else []
        if isinstance(self.manager, SystemdManager):
            # systemd starts it again, as the unit says: whom it runs as is the unit's User=,
            # which names the server's user as the service's ``user`` does.
            unit_user = self.manager.show("User").get("User")
            return identity.identity_problem(probe, [*named, *([unit_user] if unit_user else [])])
        problem = identity.identity_problem(probe, named)
        if problem is None and restart:
            problem = identity.start_problem(probe, self.spec.process_prefix)
        return problem

    def refuse_stranger(self, *, restart: bool) -> None:
        """`identity_problem` as an error: before anything is touched, the host is not
        attempted (exit 4)."""
        problem = self.identity_problem(restart=restart)
        if problem:
            raise ServerRefused(f"{self.remote.name}: {problem}")

    def start_refusal(self, user: dict[str, Any] | None) -> str | None:
        """Why the helper could not start a server as ``user`` (it is not root and not that
        user), from the last probe; None when it can, or when no probe said whom it runs as.
        Asked before anything is stopped: the helper's `start` refuses the same way."""
        return identity.start_refusal(user, self.helper_ids)

    def check_ownership(self, state: ServiceState, *, force: bool) -> None:
        """Refuse to stop a listener that is not this service's server, unless forced."""
        problem = None if force else identity.ownership_problem(state, self.spec)
        if problem:
            raise StepFailed(f"{self.remote.name}: {problem}")

    # -- stop / start --------------------------------------------------------------------------

    def stop(self, state: ServiceState, *, timeout: float | None = None, drain: bool = True) -> str:
        """Stop the service completely; return a one-line account of what was done.

        With ``drain``, the main process alone gets SIGTERM first and up to the service's
        ``drain_timeout`` to finish its in-flight requests (SGLang 0.5.9 answers 503 to health
        checks but keeps admitting requests, and exits once none is in flight: under steady
        traffic only the bound ends the drain); SIGTERM to the whole group at once would kill
        the schedulers that are computing those answers. `deploy.services.drain` says the
        progress.

        Raises:
            StepFailed: the port is still held, or the GPUs are not released, in time.
        """
        done = self.manager.stop(state, timeout=timeout, drain=drain)
        return done + self.wait_gpus_released(state)

    def start(
        self,
        *,
        argv: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        run_id: str = "",
        command: str | None = None,
        env_unset: list[str] | None = None,
        user: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Start the server detached: with ``argv``/``env`` exactly as given (a server derived
        from the running one, or undo), else from ``command`` (default: the spec's template)
        with ``env`` (default: the spec's) over the session's environment. With ``user``
        (`ServiceState.run_as`: the replaced server's uid, gid and groups) it runs as exactly
        that user, or is refused in one line; without, as the helper runs (root)."""
        return self.manager.start(
            argv=argv,
            env=env,
            cwd=cwd,
            run_id=run_id,
            command=command,
            env_unset=env_unset,
            user=user,
        )

    def wait_gpus_released(self, state: ServiceState | None = None) -> str:
        """Poll nvidia-smi until the GPUs of the server ``state`` describes (its
        ``CUDA_VISIBLE_DEVICES``, else the service's ``gpus``) are free (bounded); '' when
        not asked."""
        return wait_gpus_released(self.remote, self.spec, self.driver, state)

    # -- logs ----------------------------------------------------------------------------------

    def log_location(self) -> str:
        """Where the server's output goes: deploy's log file, or the unit's journal."""
        if self.spec.manager == "systemd":
            return f"journalctl -u {self.spec.unit}"
        return self.log_file

    def log_tail(self, offset: int = 0, lines: int = 40) -> list[str]:
        return self.manager.log_tail(offset, lines)

    def log_excerpt(self, offset: int) -> str:
        """The last 40 lines of the server's log, for a message saying why it is not serving."""
        lines = self.log_tail(offset, lines=40)
        return (
            "last log lines:\n" + "\n".join("  | " + line for line in lines)
            if lines
            else "(no log output)"
        )

    def alive(self, pid: int | None) -> bool:
        """Whether the process still exists (one SFTP stat of /proc/PID: no shell started)."""
        if pid is None:
            return True
        return self.remote.stat(f"/proc/{pid}") is not None
