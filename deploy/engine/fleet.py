"""Running a playbook (or a rollback) on many hosts: in parallel, each host independent.

One slow or dead host never blocks the others: every host has its own thread, connection and
outcome, and the run's exit code is decided once, from all of them (`RunResult.exit_code`).
"""

from __future__ import annotations

import getpass
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deploy.config.inventory import HostSpec
from deploy.config.steps import StepCommon
from deploy.engine.host_run import RunOptions, apply_host, connect_settings, holder_info
from deploy.engine.journal import now_iso
from deploy.engine.results import HostResult, RunResult
from deploy.engine.rollback import rollback_host
from deploy.remote.host import RemoteHost

HostWork = tuple[str, HostSpec, list[tuple[int, StepCommon]], dict[str, Any]]


def _in_parallel(
    names: Sequence[str], work: Callable[[int], HostResult], forks: int
) -> list[HostResult]:
    if len(names) <= 1 or forks <= 1:
        return [work(i) for i in range(len(names))]
    with ThreadPoolExecutor(max_workers=min(forks, len(names)), thread_name_prefix="host") as pool:
        return list(pool.map(work, range(len(names))))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "?"


def run_apply(hosts: list[HostWork], options: RunOptions, *, forks: int = 10) -> RunResult:
    """Apply each host's steps; results in inventory order."""
    began = time.monotonic()
    run = RunResult(
        run_id=options.run_id,
        command="check" if options.check_mode else "apply",
        playbook=options.playbook,
        started=now_iso(),
        check_mode=options.check_mode,
        user=_user(),
        argv=sys.argv[1:],
    )
    run.hosts = _in_parallel(
        [h[0] for h in hosts],
        lambda i: apply_host(hosts[i][0], hosts[i][1], hosts[i][2], hosts[i][3], options),
        forks,
    )
    run.duration = round(time.monotonic() - began, 3)
    return run


def run_rollback(
    hosts: list[tuple[str, HostSpec]],
    *,
    run_id: str,
    target_run: str | None,
    force: bool,
    accept_new_host_keys: bool = False,
    forks: int = 10,
) -> RunResult:
    """Undo ``target_run`` (or each host's newest run not yet undone) on every host."""
    began = time.monotonic()
    run = RunResult(
        run_id=run_id,
        command="rollback",
        playbook=None,
        started=now_iso(),
        user=_user(),
        argv=sys.argv[1:],
    )

    def work(i: int) -> HostResult:
        name, spec = hosts[i]
        remote = RemoteHost(connect_settings(name, spec, accept_new=accept_new_host_keys))
        try:
            return rollback_host(
                remote,
                spec.state_dir,
                target_run,
                force=force,
                holder=holder_info(run_id, "rollback"),
            )
        finally:
            remote.close()

    run.hosts = _in_parallel([h[0] for h in hosts], work, forks)
    run.duration = round(time.monotonic() - began, 3)
    return run
