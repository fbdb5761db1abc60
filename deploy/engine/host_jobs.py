"""One host's share of a run, wherever it runs: a thread of the run's process or of a worker.

A job holds what every host of a run is told (the run's id, ``--check``, ``--force``, the
target of a rollback, how hosts are opened) and nothing that lives only in the run's process
(the terminal, the history, the signal handlers), so it can be pickled to a worker process
(`deploy.engine.workers`). ``run`` takes one host and the two things a process has of its
own: whom to tell (the progress listener) and the cancel switch it watches.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from deploy.config.inventory import HostSpec
from deploy.config.resolve import HostPlan
from deploy.engine.host_run import apply_host
from deploy.engine.results import HostResult
from deploy.engine.rollback import rollback_host
from deploy.engine.run_options import Cancel, HostOpener, RunOptions, holder_info, ssh_host

log = logging.getLogger("deploy.engine")


@dataclass(frozen=True)
class ApplyJob:
    """``deploy apply`` (or ``--check``) on a host: `apply_host`."""

    run_id: str
    playbook: str = ""
    check_mode: bool = False
    accept_new_host_keys: bool = False
    force: bool = False
    inventory: str | None = None
    open_host: HostOpener = ssh_host

    @classmethod
    def of(cls, options: RunOptions) -> ApplyJob:
        return cls(
            options.run_id,
            options.playbook,
            options.check_mode,
            options.accept_new_host_keys,
            options.force,
            options.inventory,
            options.open_host,
        )

    def name(self, host: HostPlan) -> str:
        return host.name

    def run(self, host: HostPlan, progress: Any, cancel: Cancel) -> HostResult:
        options = RunOptions(
            run_id=self.run_id,
            playbook=self.playbook,
            check_mode=self.check_mode,
            accept_new_host_keys=self.accept_new_host_keys,
            force=self.force,
            progress=progress,
            inventory=self.inventory,
            cancel=cancel,
            open_host=self.open_host,
        )
        return apply_host(host, options)


@dataclass(frozen=True)
class RollbackJob:
    """``deploy rollback RUN_ID`` on a host: `rollback_host`, with a heartbeat while it works.

    ``halt`` (the first SIGINT/SIGTERM): a host not yet begun is skipped; one being undone
    finishes its undo, and is in ``halt.busy`` meanwhile (a second signal's message names it).
    """

    run_id: str
    target_run: str
    force: bool = False
    accept_new_host_keys: bool = False
    open_host: HostOpener = ssh_host

    def name(self, host: tuple[str, HostSpec]) -> str:
        return host[0]

    def run(self, host: tuple[str, HostSpec], progress: Any, halt: Cancel | None) -> HostResult:
        name, spec = host
        if halt is not None and halt.is_set():
            return HostResult(host=name, outcome="skipped", error=f"never touched: {halt.reason}")
        remote = self.open_host(name, spec, self.accept_new_host_keys)
        note = None
        if progress is not None:
            note = partial(progress.host_event, name)
            getattr(progress, "busy", lambda *_: None)(name, "rollback")
        if halt is not None:
            halt.busy.add(name)
        try:
            return rollback_host(
                remote,
                spec.state_dir,
                self.target_run,
                force=self.force,
                holder=holder_info(self.run_id, "rollback"),
                note=note,
            )
        finally:
            if halt is not None:
                halt.busy.discard(name)
            remote.close()
            if progress is not None:
                getattr(progress, "idle", lambda *_: None)(name)


def guarded(name: str, work: Callable[[], HostResult]) -> HostResult:
    """``work()``; an exception is a bug, reported as a host a human must look at."""
    try:
        return work()
    except Exception as exc:
        log.error("internal error on %s:\n%s", name, traceback.format_exc())
        return HostResult(
            host=name,
            outcome="rollback failed",
            error=f"internal error (a bug in deploy, please report it): {exc!r}; "
            "check the host: `deploy status` shows any unfinished run",
        )
