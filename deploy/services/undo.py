"""Putting a service back as a journal record says it ran, from the record alone.

A service record carries the service's definition and its state before the run. Undo is two
halves that the rollback runs around the file restores (`deploy.steps.service_undo` dispatches
them): `stop_current` stops whatever serves now (the new code), then — once the old files are
back — `restore_previous` starts the old server exactly as it ran before and waits until it is
healthy again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from deploy.config.services import ServiceSpec
from deploy.errors import RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.services.control import ServiceControl
from deploy.services.endpoint import endpoint_of_state
from deploy.services.managers import SystemdManager
from deploy.services.probes import POLL_INTERVAL, wait_healthy
from deploy.services.state import ServiceState, describe_user


def _control(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> ServiceControl:
    return ServiceControl(remote, state_dir, name, ServiceSpec.model_validate(record["spec"]))


def serving(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> str:
    """What serves ``name`` now and whether it answers its health check, in one line (for
    ``deploy resolve``: a human says the host is back; this is what deploy sees)."""
    from deploy.remote import http
    from deploy.services.probes import get

    svc = _control(remote, state_dir, name, record)
    current = svc.current()
    if not current.running:
        return "not running"
    svc.endpoint = endpoint_of_state(svc.spec, current)  # where it listens (its --host)
    try:
        answer = get(svc, svc.spec.health_path, timeout=10)
        health = f"health {svc.spec.health_path}: HTTP {answer.status}"
    except http.ServerUnavailable as exc:
        health = f"health {svc.spec.health_path}: no answer ({exc})"
    return f"{current.describe()}; {health}"


def whose(
    remote: Host,
    state_dir: str,
    name: str,
    record: dict[str, Any],
    started: dict[str, Any] | None,
    run_id: str,
) -> str | None:
    """Before an undo touches anything: is what serves ``name`` now the run's to stop?

    The run's own server (pid and start time as its ``done`` record has them, or — the run
    cut between the start and that record, or an undo cut after it started the old server
    again — the one deploy's pid file names) is stopped and the old server started again. The old server itself, never stopped (the run was cut
    before its stop), is left running: returned is the line that says so. Anything else —
    a server someone started by hand to recover — is not this undo's to stop or restart.

    Raises:
        RollbackFailed: a server this run did not start serves now.
    """
    if (record.get("spec") or {}).get("manager") == "systemd":
        return None  # the unit is the server, whatever its pid
    current = _control(remote, state_dir, name, record).current()
    if not current.running:
        return None
    before = ServiceState.from_record(record.get("before") or {})
    if before.running and current.same_process(before.pid, before.start_time):
        return f"{name}: the old server (pid {current.pid}) was never stopped; left running"
    if started and current.same_process(started.get("pid"), started.get("start")):
        return None
    if current.origin == "deploy":
        # deploy's pid file names it (pid and start time): this run's server cut between its
        # start and its record, or the old one an interrupted undo of this run started again
        return None
    ours = f"pid {started.get('pid')}" if started and started.get("pid") else "no server"
    raise RollbackFailed(
        f"{name} is served by {current.describe()}, which run {run_id} did not start (it "
        f"started {ours}): not stopping or restarting a server someone else started. If the "
        f"host is as it should be, record it with `deploy resolve {run_id} -m WHY`"
    )


def reload_refusal(remote: Host, state_dir: str, name: str, record: dict[str, Any]) -> str | None:
    """Why the undo's ``daemon-reload`` (which loads deploy's drop-in put back) would also
    deploy someone's unreviewed edit of a unit's files (``NeedDaemonReload=yes`` once the run's
    own reload was made), or None; the restart refuses the same edits before its reload."""
    manager = _control(remote, state_dir, name, record).manager
    if not isinstance(manager, SystemdManager):
        return None
    return manager.reload_problem()


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
    svc.endpoint = endpoint_of_state(svc.spec, before)  # where the old server listened
    began = time.monotonic()
    try:
        if svc.spec.manager == "systemd":
            # deploy's drop-in is back as it was (the file undo ran): load it, then start.
            manager = svc.manager
            assert isinstance(manager, SystemdManager)
            manager.daemon_reload()
            started = svc.start()
        else:
            started = svc.start(
                argv=before.argv,
                env=before.env,
                cwd=before.cwd,
                run_id="rollback",
                user=before.run_as(),  # None in a record from before users were kept: root
            )
        seconds = wait_healthy(
            svc,
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
        f"in {total:.0f} s ({seconds:.1f} s to ready); its log: {svc.log_location()}"
    )
