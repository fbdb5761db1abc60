"""How a step reaches a service: its `ServiceControl` for this run, and the run's facts about it.

Shared by the service steps (``restart``, ``stop``, ``start``, ``wait_healthy``, ``smoke``,
``gate_throughput``), which are clients of `deploy.services`; each imports this, never another
service step, so the step modules form no circle. The service machinery loads when a step
runs: validating a playbook and a file-only run never import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy.config.services import ServiceSpec
from deploy.errors import StepFailed
from deploy.steps.base import StepContext

if TYPE_CHECKING:
    from deploy.services.control import ServiceControl


def control(ctx: StepContext, name: str) -> ServiceControl:
    """The service ``name`` of the playbook on this host.

    Raises:
        StepFailed: the playbook defines no such service.
    """
    from deploy.services.control import ServiceControl

    spec = ctx.services.get(name)
    if not isinstance(spec, ServiceSpec):
        raise StepFailed(f"service {name!r} is not defined in the playbook's services")
    svc = ServiceControl(ctx.remote, ctx.state_dir, name, spec)
    if svc.needs_detection():  # once per run and host: the unit the server's cgroup names
        facts = runtime(ctx, name)
        if "unit" not in facts:
            facts["unit"] = svc.detect_unit()
        svc.use_unit(facts["unit"])  # type: ignore[arg-type]
    started = runtime(ctx, name).get("endpoint")
    if started is not None:  # the server this run started: where it listens, its key
        svc.endpoint = started  # type: ignore[assignment]
    return svc


def runtime(ctx: StepContext, name: str) -> dict[str, object]:
    """This run's facts about service ``name``: started pid and log offset, the addresses the
    new server must listen on, the baseline figures (`deploy.services.load.measure_baseline`)."""
    return ctx.runtime.setdefault(name, {})


def run_as_note(user: dict[str, object] | None) -> str:
    """`` as ml (uid 1234, gid 1234, groups 1234,44)`` for a known user, else ""."""
    from deploy.services.state import describe_user

    who = describe_user(user)
    return f" as {who}" if who else ""
