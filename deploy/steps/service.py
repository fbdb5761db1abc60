"""``restart``, ``stop``, ``start`` — a service's lifecycle, journaled so undo can reverse it.

The service's state before the change (running or not; for a running process its exact command
line, working directory and environment, read from /proc) is journaled before anything is
stopped, so that undo starts the *old* server the old way — the playbook's new flags belong to
the change being undone. A server someone started by hand on the port is adopted the same way.

Like Ansible's handlers, a restart happens only when an earlier step of this run changed
something (``only_if_changed``, default true): a re-run on a host already in the desired state
restarts nothing.
"""

from __future__ import annotations

from typing import ClassVar

from deploy.config.services import ServiceSpec
from deploy.config.steps import GateThroughputArgs, ServiceArgs, action_of, args_of
from deploy.errors import CheckFailed, StepFailed
from deploy.remote import http
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import before_change
from deploy.steps.gate_load import measure
from deploy.steps.service_control import ServiceControl, ServiceState


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
        if self.args.only_if_changed and not ctx.anything_changed():
            return Planned(
                summary=f"nothing changed in this run: {self.service} not {self.kind}ed",
                noop=True,
                skipped=True,
            )
        svc = control(ctx, self.service)
        state = svc.current()
        if self.stops and state.running:
            svc.check_ownership(state, force=ctx.force)
        if self.kind == "start" and state.running:
            return Planned(
                summary=f"{self.service} already running ({state.describe()})", noop=True
            )
        if self.kind == "stop" and not state.running and not state.leftover_pgids:
            return Planned(summary=f"{self.service} not running", noop=True)
        verb = {"restart": "restart", "stop": "stop", "start": "start"}[self.kind]
        return Planned(
            summary=f"{verb} {self.service}; now {state.describe()}", data={"state": state}
        )

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
        if self.stops:
            parts.append(svc.stop(state, timeout=getattr(self.args, "timeout", None)))
        if self.starts:
            ctx.note(f"starting {self.service}")
            started = svc.start(run_id=ctx.run_id)
            runtime(ctx, self.service).update(
                pid=started.get("pid"), log_offset=started.get("log_offset", 0), started=True
            )
            parts.append(f"started pid {started.get('pid')}")
        ctx.journal.write(
            {"event": "done", "op": "service", "step": ctx.step_index, "service": self.service}
        )
        planned.summary = "; ".join(parts)

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
