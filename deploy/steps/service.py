"""``restart``, ``stop``, ``start`` — a service's lifecycle, journaled so undo can reverse it.

The service's state before the change (running or not; for a running process its exact command
line, working directory and environment, read from /proc) is journaled before anything is
stopped, so that undo starts the *old* server the old way — the playbook's new flags belong to
the change being undone. A server someone started by hand on the port is adopted the same way.

A restart keeps the server the operator has: the new server is the running one's own argv,
environment and cwd plus the declared ``args``/``env`` changes, started as the same user (real
uid, gid and supplementary groups from /proc/PID/status: a server run as ``ml`` comes back as
``ml``, one run as root as root), and only with no server running is the service's
``command:`` used (as deploy's helper runs: a service names no user). The undo starts the old
server as the user it ran as (a journal record from before users were kept: as before). A
helper that is not root cannot switch users: the restart is refused before anything is
stopped rather than start the server as another user. The plan (and ``--check``) shows old ->
new command line and environment as a diff, secret-looking values (a name with a word ending in token, password,
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
from typing import TYPE_CHECKING, ClassVar, TypeVar

from deploy.errors import StepFailed
from deploy.statedir.records import Done, ServiceIntent
from deploy.steps import register, service_preflight
from deploy.steps.base import Planned, RecordUndo, Step, StepContext
from deploy.steps.files import before_change
from deploy.steps.service_args import RestartArgs, ServiceArgs
from deploy.steps.service_client import control, run_as_note, runtime

if TYPE_CHECKING:  # the service machinery (SSH-tunnelled HTTP, the desired command line)
    # loads when a service step runs: validating a playbook and a file-only run never need it
    from deploy.services.control import ServiceControl
    from deploy.services.desired import Desired
    from deploy.services.endpoint import Endpoint
    from deploy.services.state import ServiceState


def _new_endpoint(svc: ServiceControl, want: Desired | None) -> Endpoint:
    """Where the server just started will answer, and its key: from its command line and
    environment (its ``--host``, ``--api-key``), as `deploy.services.endpoint` reads them."""
    from deploy.services.endpoint import endpoint_of

    if want is not None and want.source == "running server":
        return endpoint_of(svc.spec, argv=want.argv, env=want.env)
    if want is not None and want.source == "systemd unit":
        # The unit's words: ``--host ${HOST}`` is systemd's to expand, not an address.
        if want.argv and not any("$" in word or "%" in word for word in want.argv):
            return endpoint_of(svc.spec, argv=want.argv, env=want.env)
        return svc.endpoint
    if want is not None and want.command:
        return endpoint_of(svc.spec, argv=shlex.split(want.command), env=want.env)
    command = shlex.split(svc.spec.command or "")
    return endpoint_of(svc.spec, argv=command, env=svc.spec.env)


ServiceArgsT = TypeVar("ServiceArgsT", bound=ServiceArgs)


class ServiceStep(Step[ServiceArgsT]):
    """Shared by restart, stop and start: probe, journal, act."""

    mutating = True
    records = (ServiceIntent, Done)
    stops: ClassVar[bool] = True
    starts: ClassVar[bool] = True

    @classmethod
    def undo_handler(cls) -> type[RecordUndo]:
        from deploy.steps.service_undo import ServiceUndo

        return ServiceUndo

    @property
    def service(self) -> str:
        return self.args.service

    def describe(self) -> str:
        return f"{self.kind} {self.service}"

    def plan(self, ctx: StepContext) -> Planned:
        if self.args.only_if_changed and not ctx.anything_changed() and self.kind != "restart":
            return Planned(
                summary=f"nothing changed in this run: {self.service} not {self.kind}ed",
                noop=True,
                skipped=True,
            )
        svc = control(ctx, self.service)
        state = svc.current()
        if isinstance(self.args, RestartArgs):
            from deploy.services.desired import desired

            want = desired(state, self.args.changes(), svc.spec)
            drop = None
            if svc.spec.manager == "systemd":  # the changes go into deploy's drop-in
                from deploy.steps import service_systemd

                drop = service_systemd.plan_dropin(ctx, svc, self.args.changes())
                want.satisfied = state.running and not drop.changed
                want.argv = list(drop.argv)
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
        if self.stops and (state.running or state.leftover_pgids):
            problem = svc.identity_problem(restart=self.starts)  # changed since the preflight?
            if problem:
                raise StepFailed(f"{ctx.host}: {problem}; nothing was stopped")
        if self.stops and state.running:
            svc.check_ownership(state, force=ctx.force)
        if isinstance(self.args, RestartArgs) and want.source == "running server":
            refusal = svc.start_refusal(want.user)
            if refusal:
                raise StepFailed(f"{ctx.host}: {refusal}; nothing was stopped")
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
        if isinstance(self.args, RestartArgs):
            planned.data["desired"] = want
            planned.diff = want.diff
            if drop is not None:
                planned.data["dropin"] = drop
                planned.diff = service_systemd.diff(drop) if drop.changed else ""
            planned.data["why"] = (
                "a file changed"
                if ctx.anything_changed()
                else "the running server differs from the desired one"
                if state.running and not want.satisfied
                else "only_if_changed is false"
            )
            if drop is not None:
                planned.summary += (
                    f"; new server: the unit with the declared changes in {drop.path}"
                    if drop.changed
                    else "; new server: the unit as it is (its drop-in already holds them)"
                )
                note = service_systemd.stop_note(svc)
                if note:
                    planned.data["stop_note"] = note
                    planned.summary += f"; note: {note}"
            elif want.source == "running server":
                planned.summary += "; new server: the running one plus the declared changes"
                if want.user:
                    planned.summary += "; start" + run_as_note(want.user)
            else:
                planned.summary += "; new server: the service's command"
            planned.summary += f" ({planned.data['why']})"
            ran = runtime(ctx, self.service).get("imports_ran_as")
            if ran:
                planned.summary += f"; the module lookup ran {ran}"
        return planned

    def preflight(self, ctx: StepContext) -> None:
        """Before the run changes anything: `deploy.steps.service_preflight.preflight`."""
        service_preflight.preflight(ctx, self.args, stops=self.stops)

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        if planned.noop or ctx.check_mode:
            return
        svc = control(ctx, self.service)
        state: ServiceState = planned.data["state"]
        want: Desired | None = planned.data.get("desired")
        if isinstance(self.args, RestartArgs) and self.args.imports and want is not None:
            # The new file is in place: the server's interpreter must import it, before the
            # stop (a NameError costs seconds, not a failed model load).
            from deploy.services.desired import checked
            from deploy.services.prechecks import import_check
            from deploy.services.state import ServiceState as _State

            server = runtime(ctx, self.service).get("server", state)
            assert isinstance(server, _State)
            new = checked(server, self.args.changes(), svc.spec)
            if new is not None:  # a server runs: check before it is stopped
                python = (new.argv or [svc.spec.python or "python3"])[0]
                import_check(
                    svc, sorted(self.args.imports), python=python, env=new.env, cwd=new.cwd,
                    pid=state.pid, note=ctx.note,
                )  # fmt: skip
        if self.starts and not state.running:  # nothing to stop: are the GPUs free to start?
            from deploy.services.prechecks import foreign_gpu_problem

            problem = foreign_gpu_problem(ctx.remote, svc.spec, state)
            if problem:
                raise StepFailed(f"{ctx.host}: {problem}; nothing was stopped or started")
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
        drop = planned.data.get("dropin")
        if drop is not None and drop.changed:  # before the stop: the unit runs on meanwhile
            from deploy.steps import service_systemd

            parts.append(service_systemd.write_dropin(ctx, svc, drop))
        if self.stops:
            if state.running and svc.spec.manager == "process":
                ctx.note(
                    f"draining {self.service} (pid {state.pid}): up to "
                    f"{svc.spec.drain_timeout:g} s for its requests in flight (SGLang keeps "
                    "admitting new ones meanwhile)"
                )
            from deploy.services import drain
            from deploy.services.endpoint import endpoint_of_state

            old = svc.endpoint
            svc.endpoint = endpoint_of_state(svc.spec, state)  # ask the old server its load
            parts.append(drain.stop(svc, state, timeout=self.args.timeout, note=ctx.note))
            svc.endpoint = old
            if svc.driver:  # asked with the GPU release wait: for the report
                runtime(ctx, self.service)["driver_version"] = svc.driver[0]
        if self.starts:
            ctx.note(f"starting {self.service}")
            if want is not None and want.source == "running server":
                started = svc.start(
                    argv=want.argv, env=want.env, cwd=want.cwd, run_id=ctx.run_id, user=want.user
                )
            elif want is not None and isinstance(self.args, RestartArgs):
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
            facts["endpoint"] = _new_endpoint(svc, want)
            if isinstance(self.args, RestartArgs):
                from deploy.services.confirm import expected_settings

                changes = self.args.changes()
                facts["confirm"] = expected_settings(changes.set, changes.remove)
            parts.append(
                f"started pid {started.get('pid')}"
                + run_as_note(started.get("user"))
                + f"; its log: {svc.log_location()}"
            )
            if started.get("user"):
                planned.figures.update(uid=started["user"]["uid"], gid=started["user"]["gid"])
        done: dict[str, object] = {
            "event": "done",
            "op": "service",
            "step": ctx.step_index,
            "service": self.service,
        }
        if self.starts:  # who the undo may stop: this run's server and no other
            done["started"] = {k: started.get(k) for k in ("pid", "start", "argv")}
        ctx.journal.write(done)
        if planned.data.get("stop_note"):
            parts.append(f"note: {planned.data['stop_note']}")
        planned.summary = "; ".join(parts)
        if planned.data.get("why"):
            planned.summary = f"{planned.data['why']}: {planned.summary}"


@register
class RestartStep(ServiceStep[RestartArgs]):
    kind = "restart"
    example = """\
- name: Restart SGLang with EAGLE-3 (if a file changed above or the server runs without it)
  tags: [service]
  restart:
    service: sglang
    args:
      set: {--speculative-algorithm: EAGLE3, --speculative-draft-model-path: /models/draft}
      remove: [--disable-cuda-graph]
    env: {set: {SGLANG_ENABLE_JIT_DEEPGEMM: "0"}, unset: [SGLANG_DEBUG]}
    imports: {sglang.srt.models.kimi_k25: "{{ model_file }}"}
"""


@register
class StopStep(ServiceStep[ServiceArgs]):
    kind = "stop"
    example = """\
- name: Stop SGLang before the weights are replaced
  stop: {service: sglang, timeout: 120, only_if_changed: false}
"""
    starts = False


@register
class StartStep(ServiceStep[ServiceArgs]):
    kind = "start"
    example = """\
- name: Start SGLang if it is not running
  start: {service: sglang, only_if_changed: false}
"""
    stops = False
