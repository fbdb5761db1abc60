"""``wait_healthy`` — wait until the (re)started server really serves.

SGLang refuses connections while it loads weights and answers 503 while it warms up; both mean
"keep waiting". Ready is 200 from ``/health_generate`` (a real 1-token generation). The wait is
long by default (45 minutes) and says what it is waiting for every few seconds: elapsed time,
the last answer and the newest log line. If the process dies or the time runs out, the step
fails with the last 40 lines of the server's log. Once healthy, a restarted server must listen
on every address:port the server it replaced listened on (read from the host's /proc).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.config.services import POLL_INTERVAL
from deploy.errors import CheckFailed
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.service_client import control, runtime

if TYPE_CHECKING:
    from deploy.services.control import ServiceControl


class WaitHealthyArgs(StrictModel):
    """Wait until the service answers 200 on its health URL (refused and 503 mean: not yet)."""

    service: str = Field(description="A key of the playbook's 'services'.")
    url: str | None = Field(
        default=None,
        description="Path or http://127.0.0.1:PORT/path on the host (default: the service's).",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds (default: the service's `start_timeout`, 45 min unless set, "
        "which the rollback's wait for the old server uses too).",
    )
    interval: float = Field(
        default=POLL_INTERVAL,
        ge=0.5,
        description="Seconds between polls (at least 0.5: at most 2 requests a second).",
    )


def health_path(url: str | None, default: str) -> tuple[str, int | None]:
    """The path (and port, if the URL names one) to poll."""
    if not url:
        return default, None
    if url.startswith("/"):
        return url, None
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), parts.port


def _confirm_settings(svc: ServiceControl, facts: dict[str, object], planned: Planned) -> None:
    """The restarted server's own word (`deploy.services.confirm`): the declared speculative
    settings must be what it runs, and the report records its SGLang, torch, CUDA, driver.

    Raises:
        CheckFailed: a declared setting is not what /server_info reports, or it cannot be read.
    """
    from deploy.services import confirm

    expected = dict(facts.get("confirm") or {})  # type: ignore[call-overload]
    try:
        info = confirm.server_info(svc)
    except CheckFailed:
        if expected:
            raise
        info = {}
    problem = confirm.settings_problem(svc.name, info, expected)
    if problem:
        raise CheckFailed(problem)
    versions = dict(facts.get("interpreter_versions") or {})  # type: ignore[call-overload]
    driver = facts.get("driver_version")
    figures = confirm.stack(info, versions, str(driver) if driver else None)
    planned.figures.update(figures)
    if expected:
        planned.summary += "; /server_info confirms " + ", ".join(
            f"{field}={value}" for field, value in expected.items()
        )
    described = confirm.describe_stack(figures)
    if described:
        planned.summary += f"; {described}"


@register
class WaitHealthyStep(Step[WaitHealthyArgs]):
    kind = "wait_healthy"
    example = """\
- name: Wait until SGLang serves (refused while loading, 503 while warming up)
  wait_healthy: {service: sglang, timeout: "{{ sglang_ready_timeout }}"}
"""

    def describe(self) -> str:
        return f"wait until {self.args.service} is healthy"

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
        if not runtime(ctx, args.service).get("started"):
            status = "would wait" if ctx.check_mode and ctx.anything_changed() else "skipped"
            return Planned(
                summary=f"{status}: {args.service} was not started in this run",
                noop=True,
                skipped=True,
            )
        timeout = args.timeout or control(ctx, args.service).spec.start_timeout
        return Planned(summary=f"wait up to {timeout:g} s for {args.service}")

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        facts = runtime(ctx, args.service)
        if planned.noop or not facts.get("started"):
            return
        from deploy.services.probes import wait_healthy

        svc = control(ctx, args.service)
        path, port = health_path(args.url, svc.spec.health_path)
        if port is not None:
            svc.spec = svc.spec.model_copy(update={"port": port})
        seconds = wait_healthy(
            svc,
            pid=facts.get("pid"),  # type: ignore[arg-type]
            path=path,
            timeout=args.timeout or svc.spec.start_timeout,
            interval=args.interval,
            log_offset=int(facts.get("log_offset", 0)),  # type: ignore[call-overload]
            on_progress=ctx.note,
        )
        planned.summary = f"{args.service} healthy after {seconds:.1f} s ({path} answered 200)"
        planned.figures["ready_s"] = round(seconds, 1)
        _confirm_settings(svc, facts, planned)
        reach = list(facts.get("reach") or [])  # type: ignore[call-overload]
        if reach:
            now = svc.current().listen
            from deploy.services.desired import reach_problem

            problem = reach_problem(args.service, reach, now)
            if problem:
                raise CheckFailed(problem)
            planned.summary += f"; listens on {', '.join(now)} as before"
        elif facts.get("reach_note"):
            planned.summary += f"; {facts['reach_note']}"
