"""Undo of service changes, from journal records alone (no playbook needed).

A service record carries the service's definition and its state before the run. Undo is two
halves that the rollback runs around the file restores: first stop whatever serves now (the new
code), then — once the old files are back — start the old server exactly as it ran before and
wait until it is healthy again. `ServiceUndo` is the handler the rollback dispatches the
``service`` intents of `deploy.steps.service` to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from deploy.config.services import ServiceSpec
from deploy.errors import RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.statedir.records import Undone
from deploy.steps.base import Recorder, RecordUndo
from deploy.steps.service_control import ServiceControl, ServiceState
from deploy.steps.service_state import describe_user
from deploy.steps.wait_healthy import POLL_INTERVAL


def _control(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> ServiceControl:
    return ServiceControl(remote, state_dir, name, ServiceSpec.model_validate(record["spec"]))


def serving(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> str:
    """What serves ``name`` now and whether it answers its health check, in one line (for
    ``deploy resolve``: a human says the host is back; this is what deploy sees)."""
    from deploy.remote import http

    svc = _control(remote, state_dir, name, record)
    current = svc.current()
    if not current.running:
        return "not running"
    try:
        answer = svc.get(svc.spec.health_path, timeout=10)
        health = f"health {svc.spec.health_path}: HTTP {answer.status}"
    except http.ServerUnavailable as exc:
        health = f"health {svc.spec.health_path}: no answer ({exc})"
    return f"{current.describe()}; {health}"


def stop_current(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> str:
    """Stop what serves ``name`` now; one line saying what was stopped."""
    svc = _control(remote, state_dir, name, record)
    try:
        current = svc.current()
        if not current.running:
            return f"{name}: nothing running to stop"
        return f"{name}: {svc.stop(current)}"
    except StepFailed as exc:
        raise RollbackFailed(f"{remote.name}: could not stop the new {name}: {exc}") from exc


def restore_previous(
    remote: Host,
    state_dir: str,
    name: str,
    record: dict[str, Any],
    *,
    note: Callable[[str], None] | None = None,
) -> str:
    """Bring ``name`` back to its state before the run; prove it healthy if it was running.

    Raises:
        RollbackFailed: the old server did not start or did not become healthy.
    """
    svc = _control(remote, state_dir, name, record)
    before = ServiceState.from_record(record.get("before") or {})
    if not before.running:
        return f"{name}: was not running before; left stopped"
    began = time.monotonic()
    try:
        if svc.spec.manager == "systemd":
            started = svc.start()
        else:
            started = svc.start(
                argv=before.argv,
                env=before.env,
                cwd=before.cwd,
                run_id="rollback",
                user=before.run_as(),  # None in a record from before users were kept: root
            )
        seconds = svc.wait_healthy(
            pid=started.get("pid"),
            path=svc.spec.health_path,
            timeout=svc.spec.start_timeout,
            interval=POLL_INTERVAL,
            log_offset=int(started.get("log_offset", 0)),
            on_progress=note,
        )
    except StepFailed as exc:
        raise RollbackFailed(
            f"{remote.name}: the old {name} could not be brought back healthy: {exc}. "
            f"Files are restored; {name} is NOT serving"
        ) from exc
    total = time.monotonic() - began
    who = describe_user(started.get("user"))
    return (
        f"{name}: old server (pid {started.get('pid')}{', as ' + who if who else ''}) healthy "
        f"in {total:.0f} s ({seconds:.1f} s to ready)"
    )


class ServiceUndo(RecordUndo):
    """Undo of ``service`` intents: the earliest record of each service holds its state
    before the run; stop what serves now first, start the old server after the files."""

    op = "service"
    phase = 1  # after the files: the old server must start on the old code

    @staticmethod
    def _first(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        services: dict[str, dict[str, Any]] = {}
        for event in records:
            services.setdefault(str(event["service"]), event)
        return services

    def check(self, records: list[dict[str, Any]]) -> None:
        """The old server's executable and working directory must still exist.

        Raises:
            RollbackFailed: one is gone, so the old server could not be started again.
        """
        for event in records:
            before = event.get("before") or {}
            if not before.get("running") or (event.get("spec") or {}).get("manager") == "systemd":
                continue
            argv = before.get("argv") or []
            places = (("executable", argv[0] if argv else None), ("cwd", before.get("cwd")))
            for label, place in places:
                if (
                    isinstance(place, str)
                    and place.startswith("/")
                    and self.remote.stat(place) is None
                ):
                    raise RollbackFailed(
                        f"the old {event.get('service')} server's {label} {place} no longer "
                        "exists, so it could not be started again"
                    )

    def release(self, records: list[dict[str, Any]]) -> list[str]:
        return [
            stop_current(self.remote, self.state_dir, name, event)
            for name, event in self._first(records).items()
        ]

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        lines = []
        for name, event in self._first(records).items():
            lines.append(restore_previous(self.remote, self.state_dir, name, event, note=self.note))
            journal.write(Undone(op="service", service=name, action="restored"))
        return lines
