"""Controlling one service on one host: find it, stop it cleanly, start it, ask if it is healthy.

Used by the service steps and by undo. The ``process`` manager drives the host-side helper
(`deploy.remote.agent`, one exec per operation); the ``systemd`` manager drives systemctl.
Health and load go through the SSH connection to the host's loopback (`deploy.remote.http`).

What "stopped" means here is what SGLang needs (DESIGN.md): the whole process group got SIGTERM
then SIGKILL, orphaned ``sglang::`` children are reaped, the port is free, and — when the service
names its GPUs — nvidia-smi shows them released. A stale listener or a GPU still held would
only fail the new server after its full model load, many minutes later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploy.checks.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    GPU_FIELDS,
    gpus_released,
    parse_compute_apps,
    parse_query_gpu,
)
from deploy.config.services import ServiceSpec
from deploy.config.steps import POLL_INTERVAL
from deploy.errors import CheckFailed, StepFailed
from deploy.remote import http
from deploy.remote.host import RemoteHost, quote

AGENT_SOURCE = (Path(__file__).resolve().parent.parent / "remote" / "agent.py").read_bytes()


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

    def describe(self) -> str:
        if not self.running:
            return "not running" + (
                " (orphaned children hold the port)" if self.leftover_pgids else ""
            )
        command = " ".join(self.argv)[:160]
        return f"pid {self.pid} ({self.origin}): {command}"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> ServiceState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class ServiceControl:
    """One service on one host, for one run."""

    def __init__(self, remote: RemoteHost, state_dir: str, name: str, spec: ServiceSpec) -> None:
        self.remote = remote
        self.name = name
        self.spec = spec
        base = f"{state_dir.rstrip('/')}/services"
        self.log_file = f"{base}/{name}.log"
        self.pid_file = f"{base}/{name}.pid"

    # -- host-side helper ----------------------------------------------------------------------

    def _agent(self, operation: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        command = f"{quote(self.spec.agent_python)} - {quote(operation)} {quote(json.dumps(args))}"
        result = self.remote.run(command, stdin=AGENT_SOURCE, timeout=timeout)
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
        probe = self._agent(
            "probe",
            {"port": self.spec.port, "pid_file": self.pid_file, "prefix": self.spec.process_prefix},
        )
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
                f"({command[:120]!r}), which is not {self.spec.match}; not stopping it "
                "(use --force if it really is the service)"
            )

    # -- stop / start --------------------------------------------------------------------------

    def stop(self, state: ServiceState, *, timeout: float | None = None) -> str:
        """Stop the service completely; return a one-line account of what was done.

        Raises:
            StepFailed: the port is still held, or the GPUs are not released, in time.
        """
        if self.spec.manager == "systemd":
            self._systemctl("stop", str(self.spec.unit))
            return f"systemctl stop {self.spec.unit}" + self.wait_gpus_released()
        wait = timeout or self.spec.stop_timeout
        pgids = ([state.pgid] if state.pgid else []) + list(state.leftover_pgids)
        sids = [state.sid] if state.sid and state.sid == state.pid else []
        report = self._agent(
            "stop",
            {
                "pids": [state.pid] if state.pid else [],
                "pgids": pgids,
                "sids": sids,
                "port": self.spec.port,
                "prefix": self.spec.process_prefix,
                "timeout": wait,
            },
            timeout=wait + 60,
        )
        self.remote.remove(self.pid_file)
        if not report.get("port_free", True):
            holders = ", ".join(
                f"pid {h['pid']} {' '.join(h['cmdline'])[:60]!r}"
                for h in report.get("holders", [])
                if h
            )
            raise StepFailed(
                f"{self.remote.name}: port {self.spec.port} still in use after the stop: {holders}"
            )
        parts = []
        if state.running:
            parts.append(f"stopped pid {state.pid}")
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
    ) -> dict[str, Any]:
        """Start the server detached; with ``argv``/``env`` exactly as given (undo), else the spec."""
        if self.spec.manager == "systemd":
            self._systemctl("start", str(self.spec.unit))
            return {"pid": None, "log_offset": 0}
        args: dict[str, Any] = {
            "log_file": self.log_file,
            "pid_file": self.pid_file,
            "cwd": cwd or self.spec.cwd,
            "header": f"=== deploy run {run_id}: starting {self.name} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ===",
        }
        if argv:
            args.update(argv=argv, env=env or {}, env_mode="exact")
        else:
            if not self.spec.command:
                raise StepFailed(f"service {self.name} has no 'command' to start it with")
            args.update(command=self.spec.command, env=self.spec.env, env_mode="merge")
        return self._agent("start", args)

    def wait_gpus_released(self) -> str:
        """Poll nvidia-smi until the service's GPUs are free (bounded); '' when not asked."""
        if self.spec.gpus is None:
            return ""
        smi = quote(self.spec.nvidia_smi)
        command = (
            f"command -v {smi} >/dev/null 2>&1 || {{ echo NO_NVIDIA_SMI; exit 0; }}; "
            f"{smi} --query-compute-apps={','.join(COMPUTE_APP_FIELDS)} --format=csv,noheader,nounits; "
            f"echo ---; {smi} --query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits"
        )
        deadline = time.monotonic() + self.spec.gpu_timeout
        why = ""
        while True:
            result = self.remote.run(command, timeout=60)
            if "NO_NVIDIA_SMI" in result.stdout:
                return "; no nvidia-smi on the host: GPU check skipped"
            apps_text, _, gpu_text = result.stdout.partition("---")
            try:
                released, why = gpus_released(
                    parse_compute_apps(apps_text),
                    self.spec.gpus,
                    parse_query_gpu(gpu_text),
                    threshold_mib=self.spec.gpu_threshold_mib,
                )
            except CheckFailed as exc:
                raise StepFailed(f"{self.remote.name}: cannot read nvidia-smi: {exc}") from exc
            if released:
                return "; GPUs released"
            if time.monotonic() > deadline:
                raise StepFailed(
                    f"{self.remote.name}: GPUs not released {self.spec.gpu_timeout:g} s after the stop: {why}"
                )
            time.sleep(1.0)

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
        return http.request(
            self.remote.transport, self.spec.address, self.spec.port, "GET", path, timeout=timeout
        )

    def post(self, path: str, body: Any, timeout: float = 300.0) -> http.HttpResponse:
        return http.request(
            self.remote.transport,
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
                newest = (self.log_tail(log_offset, lines=1) or [""])[-1]
                on_progress(
                    f"waiting for {self.name}: {elapsed:.0f} s, {status}; log: {newest[:120]}"
                )
                last_note = time.monotonic()
            time.sleep(max(0.0, interval - (time.monotonic() - began - elapsed)))

    def _log_excerpt(self, offset: int) -> str:
        lines = self.log_tail(offset, lines=40)
        return (
            "last log lines:\n" + "\n".join("  | " + line for line in lines)
            if lines
            else "(no log output)"
        )

    # -- generation ----------------------------------------------------------------------------

    def generate(self, prompt: str, max_new_tokens: int, timeout: float = 300.0) -> tuple[str, int]:
        """One POST /generate; returns (text, completion_tokens).

        Raises:
            CheckFailed: not a 200, or no usable answer.
        """
        body = {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        }
        try:
            response = self.post("/generate", body, timeout=timeout)
        except http.ServerUnavailable as exc:
            raise CheckFailed(f"POST /generate failed: {exc}") from exc
        if response.status != 200:
            raise CheckFailed(
                f"POST /generate answered HTTP {response.status}: {response.body[:200]!r}"
            )
        try:
            data = response.json()
            text = str(data.get("text", ""))
            tokens = int(data.get("meta_info", {}).get("completion_tokens", 0))
        except (ValueError, AttributeError, TypeError) as exc:
            raise CheckFailed(
                f"POST /generate gave no JSON with text and meta_info: {response.body[:200]!r}"
            ) from exc
        return text, tokens

    def throughput(
        self, *, requests: int, concurrency: int, max_new_tokens: int, prompt: str, timeout: float
    ) -> float:
        """Output tokens per second of a short concurrent load (completion tokens / wall time)."""
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(
                pool.map(lambda _: self.generate(prompt, max_new_tokens, timeout), range(requests))
            )
        wall = time.monotonic() - began
        tokens = sum(count for _, count in results)
        if tokens <= 0:
            raise CheckFailed("the load generated no tokens")
        return round(tokens / wall, 1)
