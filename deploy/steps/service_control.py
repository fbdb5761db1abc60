"""Controlling one service on one host: find it, stop it cleanly, start it, ask if it is healthy.

Used by the service steps and by undo. The ``process`` manager drives the host-side helper
(`deploy.remote.agent`, one exec per operation); the ``systemd`` manager drives systemctl.
Health and load go through the host's connection to its loopback (`Host.http`).

What "stopped" means here is what SGLang needs (DESIGN.md): the whole process group got SIGTERM
then SIGKILL, orphaned ``sglang::`` children are reaped, the port is free, and — when the service
names its GPUs — nvidia-smi shows them released. A stale listener or a GPU still held would
only fail the new server after its full model load, many minutes later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from deploy import interrupt
from deploy.checks.interpreter import root_only_if_trusted
from deploy.checks.loglines import newest_line
from deploy.config.services import ServiceSpec
from deploy.edits.cmdline import masked_argv
from deploy.errors import StepFailed
from deploy.remote import http
from deploy.remote.api import Host
from deploy.remote.host import quote
from deploy.remote.hostprogram import program
from deploy.statedir.layout import Layout
from deploy.steps.service_gpus import wait_gpus_released
from deploy.steps.service_state import ServiceState, ids_from_helper
from deploy.steps.wait_healthy import POLL_INTERVAL

__all__ = ["AGENT_SOURCE", "ServiceControl", "ServiceState"]

AGENT_SOURCE = program("agent")  # one program: agent.py with its parts inlined


class ServiceControl:
    """One service on one host, for one run."""

    def __init__(self, remote: Host, state_dir: str, name: str, spec: ServiceSpec) -> None:
        self.remote = remote
        self.name = name
        self.spec = spec
        base = Layout(state_dir).services
        self.log_file = f"{base}/{name}.log"
        self.pid_file = f"{base}/{name}.pid"
        #: (euid, uid, gid) of the host-side helper, from the last probe.
        self.helper_ids: list[int] | None = None

    # -- host-side helper ----------------------------------------------------------------------

    def _agent(self, operation: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        # The program rides on argv (code, not data: no secret, fixed size); the arguments
        # travel on stdin, so an environment of any size fits and none of it shows in
        # /proc/PID/cmdline, which every local user can read.
        command = f"{quote(self.spec.agent_python)} -c {quote(AGENT_SOURCE)} {quote(operation)}"
        command = root_only_if_trusted(self.spec.agent_python, command)
        result = self.remote.run(command, stdin=json.dumps(args).encode(), timeout=timeout)
        if not result.ok:
            raise StepFailed(
                f"{self.remote.name}: process helper ({self.spec.agent_python}) failed "
                f"during {operation}: {result.tail(3) or f'exit {result.exit_status}'}"
            )
        try:
            value = json.loads(result.stdout)
        except ValueError as exc:
            raise StepFailed(
                f"{self.remote.name}: process helper gave no answer for {operation}"
            ) from exc
        if isinstance(value, dict) and value.get("error"):
            raise StepFailed(f"{self.remote.name}: {value['error']}")
        return dict(value)

    def _systemctl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        command = "systemctl " + " ".join(quote(a) for a in args)
        result = self.remote.run(command, timeout=timeout)
        if check and not result.ok:
            raise StepFailed(f"{self.remote.name}: `{command}` failed: {result.tail(3)}")
        return result.stdout

    # -- state ---------------------------------------------------------------------------------

    def current(self) -> ServiceState:
        """What runs now: our own server (pid file), else whatever listens on the port."""
        if self.spec.manager == "systemd":
            return self._systemd_state()
        return self._state(self._probe())

    def _probe(self, **extra: Any) -> dict[str, Any]:
        return self._agent(
            "probe",
            {
                "port": self.spec.port,
                "pid_file": self.pid_file,
                "prefix": self.spec.process_prefix,
                **extra,
            },
        )

    def resolve_imports(
        self, imports: dict[str, str], fallback: dict[str, Any]
    ) -> tuple[ServiceState, dict[str, Any]]:
        """What runs, and where its own interpreter finds each module (the helper's ``probe``),
        in one round trip; with no server, ``fallback``'s python, env and cwd are used."""
        probe = self._probe(imports=imports, fallback=fallback)
        return self._state(probe), dict(probe.get("imports") or {})

    def start_refusal(self, user: dict[str, Any] | None) -> str | None:
        """Why the helper could not start a server as ``user`` (it is not root and not that
        user), from the last probe; None when it can, or when no probe said whom it runs as.
        Asked before anything is stopped: the helper's `start` refuses the same way."""
        from deploy.remote.agent_proc import start_ids

        if not user or self.helper_ids is None:
            return None
        refusal: str | None = start_ids(user, tuple(self.helper_ids))[1]  # type: ignore[no-untyped-call]
        return refusal

    def _state(self, probe: dict[str, Any]) -> ServiceState:
        ids = probe.get("helper_ids")
        self.helper_ids = [int(i) for i in ids] if isinstance(ids, list) and len(ids) == 3 else None
        info = probe.get("pid_file_process")
        origin = "deploy"
        prefix = self.spec.process_prefix
        listeners = probe.get("listeners") or []
        orphans = [
            p for p in listeners if prefix and (p.get("cmdline") or [""])[0].startswith(prefix)
        ]
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
            **ids_from_helper(info.get("user")),
        )

    def _systemd_state(self) -> ServiceState:
        unit = str(self.spec.unit)
        active = self._systemctl("is-active", unit, check=False).strip() == "active"
        if not active:
            return ServiceState(running=False, origin="systemd")
        show = self._systemctl("show", "-p", "MainPID", "--value", unit, check=False).strip()
        return ServiceState(
            running=True, pid=int(show) if show.isdigit() else None, origin="systemd"
        )

    def check_ownership(self, state: ServiceState, *, force: bool) -> None:
        """Refuse to stop a listener that is not this service's server, unless forced."""
        if state.origin != "adopted" or force:
            return
        command = " ".join(state.argv)
        if self.spec.match not in command:
            raise StepFailed(
                f"{self.remote.name}: port {self.spec.port} is held by pid {state.pid} "
                f"({' '.join(masked_argv(state.argv))[:120]!r}), which is not "
                f"{self.spec.match}; not stopping it "
                "(use --force if it really is the service)"
            )

    # -- stop / start --------------------------------------------------------------------------

    def stop(self, state: ServiceState, *, timeout: float | None = None, drain: bool = True) -> str:
        """Stop the service completely; return a one-line account of what was done.

        With ``drain``, the main process alone gets SIGTERM first and up to the service's
        ``drain_timeout`` to finish its in-flight requests (SGLang stops admitting, answers
        what it has, then exits); SIGTERM to the whole group at once would kill the schedulers
        that are computing those answers.

        Raises:
            StepFailed: the port is still held, or the GPUs are not released, in time.
        """
        if self.spec.manager == "systemd":
            self._systemctl("stop", str(self.spec.unit))
            return f"systemctl stop {self.spec.unit}" + self.wait_gpus_released()
        wait = timeout or self.spec.stop_timeout
        pgids = ([state.pgid] if state.pgid else []) + list(state.leftover_pgids)
        sids = [state.sid] if state.sid and state.sid == state.pid else []
        draining = drain and state.running and state.pid is not None
        drain_timeout = self.spec.drain_timeout if draining else 0.0
        report = self._agent(
            "stop",
            {
                "pids": [state.pid] if state.pid else [],
                "pgids": pgids,
                "sids": sids,
                "port": self.spec.port,
                "prefix": self.spec.process_prefix,
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
        return "; ".join(parts) + f"; port {self.spec.port} free" + self.wait_gpus_released()

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
        if self.spec.manager == "systemd":
            self._systemctl("start", str(self.spec.unit))
            return {"pid": None, "log_offset": 0}
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
        return self._agent("start", args)

    def wait_gpus_released(self) -> str:
        """Poll nvidia-smi until the service's GPUs are free (bounded); '' when not asked."""
        return wait_gpus_released(self.remote, self.spec)

    # -- logs and health -----------------------------------------------------------------------

    def log_tail(self, offset: int = 0, lines: int = 40) -> list[str]:
        if self.spec.manager == "systemd":
            out = self.remote.run(
                f"journalctl -u {quote(str(self.spec.unit))} -n {lines} --no-pager", timeout=30
            )
            return out.stdout.splitlines()[-lines:]
        try:
            data = self.remote.read(self.log_file)
        except (FileNotFoundError, StepFailed):
            return []
        return data[offset:].decode("utf-8", "replace").splitlines()[-lines:]

    def alive(self, pid: int | None) -> bool:
        """Whether the process still exists (one SFTP stat of /proc/PID: no shell started)."""
        if pid is None:
            return True
        return self.remote.stat(f"/proc/{pid}") is not None

    def get(self, path: str, timeout: float = 30.0) -> http.HttpResponse:
        return self.remote.http(self.spec.address, self.spec.port, "GET", path, timeout=timeout)

    def post(self, path: str, body: Any, timeout: float = 300.0) -> http.HttpResponse:
        return self.remote.http(
            self.spec.address,
            self.spec.port,
            "POST",
            path,
            body=body,
            timeout=timeout,
        )

    def wait_healthy(
        self,
        *,
        pid: int | None,
        path: str,
        timeout: float,
        interval: float = POLL_INTERVAL,
        log_offset: int = 0,
        on_progress: Callable[[str], None] | None = None,
    ) -> float:
        """Poll ``path`` until 200; refused and 503 mean "still loading". Returns the seconds.

        Raises:
            StepFailed: the process died, or ``timeout`` passed; the message carries the last
                40 lines of the server's log.
        """
        began = time.monotonic()
        last_note = 0.0
        status = "no answer yet"
        while True:
            try:
                response = self.get(path, timeout=max(interval * 5, 10))
                if response.status == 200:
                    return time.monotonic() - began
                status = f"HTTP {response.status}"
            except http.ServerUnavailable as exc:
                status = (
                    "connection refused"
                    if "refused" in str(exc).lower() or "connect failed" in str(exc).lower()
                    else str(exc)
                )
            elapsed = time.monotonic() - began
            if not self.alive(pid):
                raise StepFailed(
                    f"{self.name} (pid {pid}) exited after {elapsed:.0f} s, before it was healthy\n"
                    + self._log_excerpt(log_offset)
                )
            if elapsed > timeout:
                raise StepFailed(
                    f"{self.name} not healthy after {timeout:g} s (last: {status})\n"
                    + self._log_excerpt(log_offset)
                )
            if on_progress and time.monotonic() - last_note >= 5:
                # Not our own polls' access-log lines: what the server itself last said.
                newest = newest_line(self.log_tail(log_offset, lines=20))
                log = f"; log: {newest[:120]}" if newest else ""
                on_progress(f"waiting for {self.name}: {elapsed:.0f} s, {status}{log}")
                last_note = time.monotonic()
            # Cut short by the run's interrupt: the load is not waited out (deploy.interrupt).
            interrupt.pause(interval - (time.monotonic() - began - elapsed))

    def _log_excerpt(self, offset: int) -> str:
        lines = self.log_tail(offset, lines=40)
        return (
            "last log lines:\n" + "\n".join("  | " + line for line in lines)
            if lines
            else "(no log output)"
        )
