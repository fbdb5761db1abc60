"""A restart of a systemd unit's server: the declared changes become deploy's drop-in.

The restart step calls these when the service's manager is (or was detected as) ``systemd``.
Before anything is touched (the preflight) a unit with edits systemd has not loaded is refused
(``NeedDaemonReload=yes``: our ``daemon-reload`` would deploy them unreviewed), and a
``TimeoutStopSec`` shorter than the service's drain bound is said as a note (systemd kills the
server then, whatever is in flight). The plan computes deploy's drop-in
(`deploy.services.dropin`) from ``systemctl cat`` and shows it as a diff; the change writes it
with the file steps' machinery (journaled with a saved copy, or as a created file: undo puts it
back as it was, or removes it), then ``daemon-reload``; the stop and start go through systemctl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy.errors import NothingTouched, StepFailed
from deploy.steps.base import StepContext

if TYPE_CHECKING:
    from deploy.services.control import ServiceControl
    from deploy.services.desired import Changes
    from deploy.services.dropin import DropIn
    from deploy.services.managers import SystemdManager


def manager_of(svc: ServiceControl) -> SystemdManager:
    from deploy.services.managers import SystemdManager

    manager = svc.manager
    assert isinstance(manager, SystemdManager)
    return manager


def preflight(ctx: StepContext, svc: ServiceControl, name: str) -> None:
    """Refuse a unit with unloaded edits (exit 4); note a stop timeout below the drain bound.

    Raises:
        NothingTouched: ``NeedDaemonReload=yes``.
    """
    problem = manager_of(svc).reload_problem()
    if problem:
        raise NothingTouched(f"{ctx.host}: {name}: {problem}; nothing was stopped or changed")
    note = stop_note(svc)
    if note:
        ctx.note(f"{name}: {note}")


def stop_note(svc: ServiceControl) -> str | None:
    """What to say when the unit's ``TimeoutStopSec`` is shorter than the service's drain
    bound (systemd's stop is the drain: it kills the server when that time is up), or None."""
    from deploy.services.dropin import timespan

    manager = manager_of(svc)
    stop_s = timespan(manager.show("TimeoutStopUSec").get("TimeoutStopUSec", ""))
    if stop_s is None or stop_s >= svc.spec.drain_timeout:
        return None
    return (
        f"{manager.unit} has TimeoutStopSec {stop_s:g} s, shorter than the "
        f"{svc.spec.drain_timeout:g} s drain bound: systemd kills the server then, with "
        "requests still in flight"
    )


def plan_dropin(ctx: StepContext, svc: ServiceControl, changes: Changes) -> DropIn:
    """deploy's drop-in with ``changes`` applied to the unit's effective ExecStart.

    Raises:
        StepFailed: the unit has no ExecStart= to change.
    """
    from deploy.services.dropin import compute, dropin_path, parse_cat
    from deploy.steps.files import read_file_or_none

    manager = manager_of(svc)
    path = dropin_path(svc.spec.unit_dir, manager.unit)
    current = read_file_or_none(ctx, path)
    unit = parse_cat(manager.cat())
    try:
        return compute(unit, path, current.content if current else None, changes, svc.spec.match)
    except ValueError as exc:
        raise StepFailed(f"{ctx.host}: {manager.unit}: {exc}; nothing was changed") from exc


def diff(drop: DropIn) -> str:
    """The drop-in's change as a unified diff, secret-looking values as ``***``."""
    from deploy.edits.text import unified_diff
    from deploy.services.dropin import shown

    return unified_diff(shown(drop.before or b""), shown(drop.after), drop.path)


def write_dropin(ctx: StepContext, svc: ServiceControl, drop: DropIn) -> str:
    """Write deploy's drop-in (journaled, atomic: the file steps' machinery) and load it;
    one line saying what was done. The unit's unloaded edits are checked again first.

    Raises:
        StepFailed: the unit has unloaded edits now, or systemctl failed.
    """
    from deploy.steps.create import create_file, missing_dirs
    from deploy.steps.files import read_file_or_none, write_file

    manager = manager_of(svc)
    problem = manager.reload_problem()
    if problem:
        raise StepFailed(f"{ctx.host}: {problem}")
    if read_file_or_none(ctx, drop.path) is None:
        dirs = missing_dirs(ctx, drop.path, create_dirs=True)
        create_file(ctx, drop.path, drop.after, dirs=dirs, mode=0o644)
    else:
        write_file(ctx, drop.path, drop.after)
    manager.daemon_reload()
    return f"wrote {drop.path} and ran systemctl daemon-reload"
