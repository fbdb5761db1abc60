"""Which run ``deploy rollback`` undoes, where, and how the confirmation names it.

``deploy rollback`` means one run. Without RUN_ID it is the latest ``apply`` of this inventory
that changed some host (even if it then rolled itself back: then there is nothing to do), from this workstation's history (`deploy.engine.history`),
ordered by start time parsed, never by ids as text. A retry after a partial failure therefore
names the same run again: the hosts that were restored answer "already rolled back", the
others finish, and no older run is ever reached. Each host then decides from its own journals
whether the run may be undone there (`deploy.statedir.runs.decide_rollback`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from deploy.config.inventory import HostSpec
from deploy.engine import history
from deploy.engine.results import RunResult
from deploy.engine.runid import is_full_run_id
from deploy.errors import InputError

#: Host outcomes after which a run's changes may still stand on that host.
LEFT_CHANGES = frozenset({"changed", "rollback failed", "interrupted"})
#: Host outcomes of a run that touched the host (its journal there says what stands).
TOUCHED = LEFT_CHANGES | {"rolled back"}
SERVICE_STEPS = frozenset({"restart", "start", "stop"})


def _when(run: RunResult) -> float:
    try:
        return datetime.fromisoformat(run.started).timestamp()
    except ValueError:
        return 0.0


def latest_apply(inventory: str) -> RunResult | None:
    """The latest apply of ``inventory`` that touched some host (None: none recorded)."""
    runs = [
        run
        for run in history.load_all()
        if run.command == "apply"
        and not run.check_mode
        and run.inventory == inventory
        and any(h.outcome in TOUCHED for h in run.hosts)
    ]
    if not runs:
        return None
    return max(runs, key=_when)


@dataclass
class RollbackTarget:
    """The run ``deploy rollback`` will undo and where; the question it asks is made from
    this by `deploy.report.records.render_rollback_question` (fitted to the terminal)."""

    #: None: no apply of this inventory is recorded here, so there is nothing to name.
    run_id: str | None
    hosts: list[tuple[str, HostSpec]]
    recorded: RunResult | None = None
    #: Hosts the run touched that this inventory (or --limit) does not reach.
    missing: list[str] = field(default_factory=list)


def choose(run_id: str | None, inventory: str, hosts: list[tuple[str, HostSpec]]) -> RollbackTarget:
    """The run to undo and the hosts to undo it on (``hosts``: the inventory after --limit).

    Raises:
        InputError: RUN_ID is no run id (a path), names several recorded runs, or is a part
            of an id that no recorded run has.
    """
    if run_id is None:
        recorded = latest_apply(inventory)
        if recorded is None:
            return RollbackTarget(None, [])
    else:
        recorded = history.load(run_id)
        if recorded is None and not is_full_run_id(run_id):
            # A part of an id can only be completed from this workstation's records; a run
            # kept only on the hosts (another workstation's) is named in full.
            raise InputError(
                f"no recorded run {run_id} (see `deploy history`; a run kept only on the "
                "hosts is named in full, as `deploy status` lists it)"
            )
    if recorded is None or recorded.command != "apply":
        return RollbackTarget(run_id, list(hosts))
    touched = [h.host for h in recorded.hosts if h.outcome in TOUCHED]
    reach = dict(hosts)
    return RollbackTarget(
        recorded.run_id,
        [(name, reach[name]) for name in touched if name in reach],
        recorded,
        [name for name in touched if name not in reach],
    )
