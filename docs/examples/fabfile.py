"""A Fabric task that deploys with deploy's Python API (docs/api.md).

    fab eagle3                      # apply kimi-eagle3 to every host of ./hosts.yaml
    fab eagle3 --check              # only the plan: what would change
    fab eagle3 --limit gpu-node-01.dc2.example.internal --playbook other

Fabric runs the task; deploy does the change, its verification and its rollback. The task
reads the typed report (what ``deploy apply --json`` prints) instead of parsing output. The
run is stopped by a token, not by a signal handler: here a deadline cancels it after
``--max-seconds`` (hosts mid-change are rolled back, as for a failure).
"""

from __future__ import annotations

import threading

from fabric import task
from invoke.exceptions import Exit

from deploy import CancelToken, apply, plan


@task(help={"check": "Only show what would change.", "max_seconds": "Cancel after this long."})
def eagle3(
    c,
    playbook="kimi-eagle3",
    inventory="hosts.yaml",
    limit=None,
    check=False,
    max_seconds=0,
):
    """Apply (or plan) a deploy playbook and fail the task unless every host got there."""
    token = CancelToken()
    if int(max_seconds) > 0:
        timer = threading.Timer(int(max_seconds), token.cancel, args=("the task's deadline",))
        timer.daemon = True
        timer.start()
    run = plan if check else apply
    report = run(playbook, inventory=inventory, limit=[limit] if limit else None, cancel=token)
    for host in report.hosts:
        gate = next((s.figures for s in host.steps if "tokens_per_s_c1" in s.figures), {})
        speed = f" ({gate['tokens_per_s_c1']} tok/s at c1)" if gate else ""
        print(f"{host.host}: {host.outcome}{speed}" + (f": {host.error}" if host.error else ""))
    print(f"run {report.run_id}: exit {report.exit_code}")
    if report.exit_code != 0:
        raise Exit(code=report.exit_code)
