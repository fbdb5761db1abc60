"""``restart``, ``stop``, ``start`` — a service's lifecycle, journaled so undo can reverse it.

The service's state before the change (running or not; for a running process its exact command
line, working directory and environment, read from /proc) is journaled before anything is
stopped, so that undo starts the *old* server the old way — the playbook's new flags belong to
the change being undone. A server someone started by hand on the port is adopted the same way.

A restart keeps the server the operator has: the new server is the running one's own argv,
environment and cwd plus the declared ``args``/``env`` changes, and only with no server running
is the service's ``command:`` used. The plan (and ``--check``) shows old -> new command line and
environment as a diff, secret-looking values (a name with a word ending in token, password,
secret or key: `deploy.masking`) as ``***``. The running server is part of the desired state: a restart happens when
an earlier step of this run changed something *or* the running server differs from the desired
one (``only_if_changed``, default true; false restarts always). A re-run on a host already in
the desired state restarts nothing.

Around the replacement: before the run touches anything on the host, the server's own
interpreter (``/proc/PID/exe`` as invoked, with the server's environment and cwd; with no
server, the service's ``python`` with its ``env``) must find each ``imports`` module in the file
named, after realpath, without importing it; the stop drains (SIGTERM to the main process
alone, up to the service's ``drain_timeout`` for its requests in flight, then the group); and
``wait_healthy`` requires the new server to listen on every address:port the old one did.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from deploy.config.services import ServiceSpec
from deploy.config.steps import (
    GateThroughputArgs,
    RestartArgs,
    ServiceArgs,
    action_of,
    args_of,
)
from deploy.errors import CheckFailed, StepFailed
from deploy.remote import http
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import before_change
from deploy.steps.gate_load import measure
from deploy.steps.service_control import ServiceControl, ServiceState
from deploy.steps.service_desired import Desired, desired, imports_problem


def control(ctx: StepContext, name: str) -> ServiceControl:
    spec = ctx.services.get(name)
    if not isinstance(spec, ServiceSpec):
        raise StepFailed(f"service {name!r} is not defined in the playbook's services")
    return ServiceControl(ctx.remote, ctx.state_dir, name, spec)


def runtime(ctx: StepContext, name: str) -> dict[str, object]:
    return ctx.runtime.setdefault(name, {})


class ServiceStep(Step):
    """Shared by restart, stop and start: probe, journal, act."""

    mutating = True
    stops: ClassVar[bool] = True
    starts: ClassVar[bool] = True

    @property
    def service(self) -> str:
        assert isinstance(self.args, ServiceArgs)
        return self.args.service

    def describe(self) -> str:
        return f"{self.kind} {self.service}"

    def plan(self, ctx: StepContext) -> Planned:
        assert isinstance(self.args, ServiceArgs)
        if self.args.only_if_changed and not ctx.anything_changed() and self.kind != "restart":
            return Planned(
                summary=f"nothing changed in this run: {self.service} not {self.kind}ed",
                noop=True,
                skipped=True,
            )
        svc = control(ctx, self.service)
        state = svc.current()
        if self.kind == "restart":
            assert isinstance(self.args, RestartArgs)
            want = desired(state, self.args, svc.spec)
            if self.args.only_if_changed and not ctx.anything_changed():
                if not state.running:
                    return Planned(
                        summary=f"nothing changed in this run and {self.service} is not "
                        "running: not started",
                        noop=True,
                        skipped=True,
                    )
                if want.satisfied:
                    return Planned(
                        summary=f"nothing changed in this run and {self.service} already runs "
                        f"as desired ({state.describe()}): not restarted",
                        noop=True,
                    )
        if self.stops and state.running:
            svc.check_ownership(state, force=ctx.force)
        if self.kind == "start" and state.running:
            return Planned(
                summary=f"{self.service} already running ({state.describe()})", noop=True
            )
        if self.kind == "stop" and not state.running and not state.leftover_pgids:
            return Planned(summary=f"{self.service} not running", noop=True)
        verb = {"restart": "restart", "stop": "stop", "start": "start"}[self.kind]
        planned = Planned(
            summary=f"{verb} {self.service}; now {state.describe()}", data={"state": state}
        )
        if self.kind == "restart":
            planned.data["desired"] = want
            planned.diff = want.diff
            planned.data["why"] = (
                "a file changed"
                if ctx.anything_changed()
                else "the running server differs from the desired one"
                if state.running and not want.satisfied
                else "only_if_changed is false"
            )
            if want.source == "running server":
                planned.summary += "; new server: the running one plus the declared changes"
            else:
                planned.summary += "; new server: the service's command"
            planned.summary += f" ({planned.data['why']})"
        return planned

    def preflight(self, ctx: StepContext) -> None:
        """Before the run changes anything: the interpreter that runs the server must find
        every ``imports`` module in the file named (a pip-installed sglang in site-packages
        beside an edited checkout would otherwise load the unpatched copy after the restart).

        Raises:
            StepFailed: a module resolves elsewhere, or not at all; both paths named.
        """
        args = self.args
        if not isinstance(args, RestartArgs) or not args.imports:
            return
        svc = control(ctx, self.service)
        python = svc.spec.python or (shlex.split(svc.spec.command or "") or ["python3"])[0]
        fallback = {"python": python, "env": svc.spec.env, "cwd": svc.spec.cwd}
        state, answer = svc.resolve_imports(dict(args.imports), fallback)
        if state.running:  # a stranger on the port: refuse that first, and say so
            svc.check_ownership(state, force=ctx.force)
        problem = imports_problem(answer)
        if problem:
            raise StepFailed(f"{ctx.host}: {problem}; nothing was stopped or changed")

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        if planned.noop or ctx.check_mode:
            return
        svc = control(ctx, self.service)
        state: ServiceState = planned.data["state"]
        self._baseline(ctx, svc, state)
        before_change(ctx)
        ctx.journal.write(
            {
                "event": "intent",
                "op": "service",
                "step": ctx.step_index,
                "service": self.service,
                "action": self.kind,
                "before": state.to_record(),
                "spec": svc.spec.model_dump(),
            }
        )
        ctx.changed = True
        parts = []
        want: Desired | None = planned.data.get("desired")
        if self.stops:
            if state.running and svc.spec.manager == "process":
                ctx.note(
                    f"draining {self.service} (pid {state.pid}): up to "
                    f"{svc.spec.drain_timeout:g} s for its requests in flight"
                )
            parts.append(svc.stop(state, timeout=getattr(self.args, "timeout", None)))
        if self.starts:
            ctx.note(f"starting {self.service}")
            if want is not None and want.source == "running server":
                started = svc.start(argv=want.argv, env=want.env, cwd=want.cwd, run_id=ctx.run_id)
            elif want is not None:
                assert isinstance(self.args, RestartArgs)
                started = svc.start(
                    run_id=ctx.run_id,
                    command=want.command,
                    env=want.env,
                    env_unset=list(self.args.env.unset) if self.args.env else [],
                )
            else:
                started = svc.start(run_id=ctx.run_id)
            facts = runtime(ctx, self.service)
            facts.update(
                pid=started.get("pid"), log_offset=started.get("log_offset", 0), started=True
            )
            if want is not None:
                facts.update(reach=list(want.reach), reach_note=want.reach_note)
            parts.append(f"started pid {started.get('pid')}")
        ctx.journal.write(
            {"event": "done", "op": "service", "step": ctx.step_index, "service": self.service}
        )
        planned.summary = "; ".join(parts)
        if planned.data.get("why"):
            planned.summary = f"{planned.data['why']}: {planned.summary}"

    def _baseline(self, ctx: StepContext, svc: ServiceControl, state: ServiceState) -> None:
        """Measure the old server now if a later gate compares against 'before'."""
        gates = [
            args_of(entry)
            for entry in ctx.upcoming
            if action_of(entry) == "gate_throughput"
            and getattr(args_of(entry), "service", None) == self.service
        ]
        gate = next(
            (g for g in gates if isinstance(g, GateThroughputArgs) and g.baseline == "before"), None
        )
        if gate is None or not self.stops:
            return
        facts = runtime(ctx, self.service)
        if not state.running:
            facts["baseline_note"] = "old server was not running"
            return
        try:
            health = svc.get(svc.spec.health_path, timeout=30)
            if health.status != 200:
                facts["baseline_note"] = f"old server not healthy (HTTP {health.status})"
                return
            ctx.note(f"measuring {self.service} before the restart (baseline)")
            facts["baseline"] = [level.to_record() for level in measure(svc, gate, ctx.note)]
        except (http.ServerUnavailable, CheckFailed) as exc:
            facts["baseline_note"] = f"old server could not be measured: {exc}"


class RestartStep(ServiceStep):
    kind = "restart"


class StopStep(ServiceStep):
    kind = "stop"
    starts = False


class StartStep(ServiceStep):
    kind = "start"
    stops = False
