"""How a server is found, stopped and started: one interface, one class per manager.

- `ProcessManager` (``manager: process``): deploy's host-side helper finds the server by its
  listeners and our pid file, stops it by process group (drain first: SIGTERM to the main
  process alone), reaps orphaned ``sglang::`` children, and starts it detached in its own
  session with a pid file and a log under ``state_dir/services``.
- `SystemdManager` (``manager: systemd``): systemctl on the service's ``unit``; the unit says
  how the server runs, and the declared changes go into deploy's drop-in
  (`deploy.services.dropin`, written by the restart step) before ``daemon-reload``; the server
  is never signalled directly.

`deploy.services.control.ServiceControl` picks one (`manager_for`) and adds what is the same
for both: the GPU release wait after a stop, the readiness wait.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from deploy.config.services import ServiceSpec
from deploy.edits.cmdline import masked_argv
from deploy.errors import StepFailed
from deploy.remote.api import Host
from deploy.remote.host import quote
from deploy.services.helper import call_helper
from deploy.services.identity import helper_ids_of, state_from_probe
from deploy.services.state import ServiceState


class Manager(Protocol):
    """What a service's manager does; every method may raise `StepFailed`."""

    kind: str

    def current(self) -> ServiceState:
        """What runs now."""

    def stop(self, state: ServiceState, *, timeout: float | None, drain: bool) -> str:
        """Stop ``state`` completely; a one-line account (without the GPU wait)."""

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
        """Start the server: ``argv``/``env``/``cwd`` exactly (derived from a running server),
        else ``command`` with ``env`` merged; as ``user`` when given. The answer has at least
        ``pid`` and ``log_offset``."""

    def log_tail(self, offset: int = 0, lines: int = 40) -> list[str]:
        """The server's last log lines (from ``offset`` in deploy's own log)."""


class ProcessManager:
    """A server run as a plain process tree, through deploy's host-side helper."""

    kind = "process"

    def __init__(
        self, remote: Host, spec: ServiceSpec, name: str, log_file: str, pid_file: str
    ) -> None:
        self.remote, self.spec, self.name = remote, spec, name
        self.log_file, self.pid_file = log_file, pid_file
        #: (euid, uid, gid) of the host-side helper, from the last probe.
        self.helper_ids: tuple[int, ...] | None = None
        #: The last probe's answer: what `deploy.services.identity` judges.
        self.last_probe: dict[str, Any] | None = None

    def helper(self, operation: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        return call_helper(self.remote, self.spec.agent_python, operation, args, timeout)

    def probe(self, **extra: Any) -> dict[str, Any]:
        """The helper's ``probe``: listeners on the port, our pid file's process, the helper's
        own ids; ``extra`` asks more of it in the same round trip (an ``imports`` lookup)."""
        answer = self.helper(
            "probe",
            {
                "port": self.spec.port,
                "pid_file": self.pid_file,
                "prefix": self.spec.process_prefix,
                **extra,
            },
        )
        self.helper_ids = helper_ids_of(answer)
        self.last_probe = answer
        return answer

    def current(self) -> ServiceState:
        return state_from_probe(self.probe(), self.spec.process_prefix)

    def stop(self, state: ServiceState, *, timeout: float | None = None, drain: bool = True) -> str:
        wait = timeout or self.spec.stop_timeout
        pgids = ([state.pgid] if state.pgid else []) + list(state.leftover_pgids)
        sids = [state.sid] if state.sid and state.sid == state.pid else []
        draining = drain and state.running and state.pid is not None
        drain_timeout = self.spec.drain_timeout if draining else 0.0
        report = self.helper(
            "stop",
            {
                "pids": [state.pid] if state.pid else [],
                "pgids": pgids,
                "sids": sids,
                "port": self.spec.port,
                "timeout": wait,
                "drain_pids": [state.pid] if draining else [],
                "drain_timeout": drain_timeout,
            },
            timeout=drain_timeout + wait + 60,
        )
        self.remote.remove(self.pid_file)
        if not report.get("port_free", True):
            holders = ", ".join(
                f"pid {h['pid']} {' '.join(masked_argv(h['cmdline']))[:60]!r}"
                for h in report.get("holders", [])
                if h
            )
            raise StepFailed(
                f"{self.remote.name}: port {self.spec.port} still in use after the stop: {holders}"
            )
        parts = []
        if state.running:
            parts.append(f"stopped pid {state.pid}")
        if "drained" in report:
            parts.append(
                f"drained in {report['drain_s']:.1f} s"
                if report["drained"]
                else f"still busy after the {drain_timeout:g} s drain"
            )
        leftovers = [*report.get("killed", []), *report.get("reaped", [])]
        if leftovers:
            names = ", ".join(f"{r['title'][:40]} (pid {r['pid']})" for r in leftovers)
            parts.append(f"reaped {names} with SIGKILL")
        if not parts:
            parts.append("was not running")
        return "; ".join(parts) + f"; port {self.spec.port} free"

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
        args: dict[str, Any] = {
            "log_file": self.log_file,
            "pid_file": self.pid_file,
            "cwd": cwd or self.spec.cwd,
            "header": f"=== deploy run {run_id}: starting {self.name} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ===",
        }
        if user is not None:
            args["user"] = user
        if argv:
            args.update(argv=argv, env=env or {}, env_mode="exact")
        else:
            command = command or self.spec.command
            if not command:
                raise StepFailed(f"service {self.name} has no 'command' to start it with")
            # An empty value ("{{ sglang_pythonpath }}" left at its default) must not wipe the
            # variable the server would inherit.
            merged = env if env is not None else self.spec.env
            merged = {key: value for key, value in merged.items() if value != ""}
            args.update(
                command=command, env=merged, env_mode="merge", env_unset=list(env_unset or [])
            )
        return self.helper("start", args)

    def log_tail(self, offset: int = 0, lines: int = 40) -> list[str]:
        try:
            data = self.remote.read(self.log_file)
        except (FileNotFoundError, StepFailed):
            return []
        return data[offset:].decode("utf-8", "replace").splitlines()[-lines:]


class SystemdManager:
    """A server systemd runs as ``spec.unit``: systemctl, and its journal for logs."""

    kind = "systemd"

    def __init__(self, remote: Host, spec: ServiceSpec) -> None:
        self.remote, self.spec = remote, spec
        self.unit = str(spec.unit)

    def systemctl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        command = "systemctl " + " ".join(quote(a) for a in args)
        result = self.remote.run(command, timeout=timeout)
        if check and not result.ok:
            raise StepFailed(f"{self.remote.name}: `{command}` failed: {result.tail(3)}")
        return result.stdout

    def cat(self) -> str:
        """``systemctl cat UNIT``: the unit file and its drop-ins, in the order systemd
        applies them (what `deploy.services.dropin.parse_cat` reads)."""
        return self.systemctl("cat", self.unit, timeout=30)

    def show(self, *props: str) -> dict[str, str]:
        """``systemctl show -p A -p B UNIT`` as a dict."""
        from deploy.services.dropin import parse_show

        args = [word for prop in props for word in ("-p", prop)]
        return parse_show(self.systemctl("show", *args, self.unit, timeout=30))

    def reload_problem(self) -> str | None:
        """Why a ``daemon-reload`` now would do more than load deploy's drop-in: the unit has
        edits systemd has not loaded (``NeedDaemonReload=yes``) — someone's unreviewed change
        our reload would deploy. None when it has none."""
        if self.show("NeedDaemonReload").get("NeedDaemonReload") != "yes":
            return None
        return (
            f"{self.unit} has changes systemd has not loaded (NeedDaemonReload=yes): deploy's "
            "daemon-reload would deploy them unreviewed; review them and run `systemctl "
            "daemon-reload` (or undo them) first"
        )

    def daemon_reload(self) -> None:
        self.systemctl("daemon-reload")

    def current(self) -> ServiceState:
        active = self.systemctl("is-active", self.unit, check=False).strip() == "active"
        if not active:
            return ServiceState(running=False, origin="systemd")
        show = self.systemctl("show", "-p", "MainPID", "--value", self.unit, check=False).strip()
        return ServiceState(
            running=True, pid=int(show) if show.isdigit() else None, origin="systemd"
        )

    def stop(self, state: ServiceState, *, timeout: float | None = None, drain: bool = True) -> str:
        self.systemctl("stop", self.unit)
        return f"systemctl stop {self.unit}"

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
        # The unit says how the server runs (with deploy's drop-in): what a process manager
        # would start it with does not apply. ``reset-failed`` first: a crash loop's start
        # limit must not block the start (the undo's above all).
        self.systemctl("reset-failed", self.unit, check=False)
        self.systemctl("start", self.unit)
        main = self.systemctl("show", "-p", "MainPID", "--value", self.unit, check=False).strip()
        return {"pid": int(main) if main.isdigit() and main != "0" else None, "log_offset": 0}

    def log_tail(self, offset: int = 0, lines: int = 40) -> list[str]:
        out = self.remote.run(f"journalctl -u {quote(self.unit)} -n {lines} --no-pager", timeout=30)
        return out.stdout.splitlines()[-lines:]
