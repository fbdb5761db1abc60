"""`prepare`: a run's input loaded and checked, before any host is contacted (`Prepared`).

Its own module, importing no SSH: the CLI prepares a run, then starts the first hosts' TCP
connects (`Prepared.first_wave`, `deploy.remote.dial`) before it imports the SSH stack and the
engine, so that those round trips overlap the imports (docs/performance.md, "Ablation").
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.config.locate import find_playbook, inventory_path


def _extra_vars(value: Mapping[str, Any] | Sequence[str] | None) -> dict[str, Any]:
    """``-e`` as a mapping, or as the command line's items (``NAME=VALUE``, ``@FILE``)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    from deploy.config import load

    return dict(load.parse_extra_vars(list(value)))


@dataclass
class Prepared:
    """A validated run, before any host is contacted: what `apply` and the CLI both run."""

    inventory: Path
    playbook: Any  # deploy.config.load.LoadedPlaybook
    plans: list[Any]  # deploy.config.resolve.HostPlan, one per selected host
    serial: Any = None
    max_fail: Any = None

    @property
    def name(self) -> str:
        return str(self.playbook.playbook.name)

    def first_wave(self, forks: int, workers: int | None, *, check: bool) -> list[Any]:
        """The plans of the hosts the engine opens first, in this process: the first batch's
        first ``forks`` (`deploy.engine.fleet.run_apply`'s order); none when the run goes to
        worker processes (`deploy.engine.shards`), which connect on their own."""
        from deploy.engine import batches, shards

        names = [plan.name for plan in self.plans]
        cut = batches.plan_batches(names, None if check else self.serial)
        busy = shards.busy_at_once(forks, [len(batch) for batch in cut])
        if shards.worker_count(workers, busy, cores=shards.cores()) > 1:
            return []
        first = set(cut[0][:forks]) if cut else set()
        return [plan for plan in self.plans if plan.name in first]


def prepare(
    playbook: str | os.PathLike[str],
    *,
    inventory: str | os.PathLike[str] | None = None,
    limit: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | Sequence[str] | None = None,
    tags: Sequence[str] | None = None,
    skip_tags: Sequence[str] | None = None,
    serial: str | None = None,
    max_fail: str | None = None,
    loaded_inventory: Any = None,
) -> Prepared:
    """Load and check the inventory and the playbook; contacts no host.

    Raises:
        InputError: the first problem, as ``file:line:col field: message``.
    """
    from deploy.config import inventory_file, load
    from deploy.engine import batches
    from deploy.errors import InputError

    path = inventory_path(inventory)
    inv = loaded_inventory or inventory_file.load_inventory(path)
    pb = load.load_playbook(find_playbook(playbook, path))
    plans = load.resolve(
        inv,
        pb,
        extra_vars=_extra_vars(extra_vars),
        limit=list(limit) if limit else None,
        tags=set(tags) if tags else None,
        skip_tags=set(skip_tags) if skip_tags else None,
    )
    if not plans:
        raise InputError("no host matches the playbook's hosts and --limit")
    sizes = serial if serial is not None else pb.playbook.serial
    fail = max_fail if max_fail is not None else pb.playbook.max_fail
    return Prepared(
        path,
        pb,
        plans,
        batches.parse_serial(sizes) if sizes is not None else None,
        batches.parse_max_fail(fail) if fail is not None else None,
    )
