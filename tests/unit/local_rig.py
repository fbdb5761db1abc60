"""A host that is this machine (`tests.unit.local_host.LocalHost`) and a workstation to run on it.

`LocalRig` writes an inventory and playbooks into a private (0700) directory, runs the engine
(`run_apply`, `run_rollback`) with `RunOptions.open_host` giving `LocalHost`s, and reads the
host's state directory back. The lock script, the session loop and the file helper are the
real ones, so these tests prove the engine's and the steps' behaviour on real files in
seconds; SSH itself is the integration suite's job.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy.config import load
from deploy.config.inventory import HostSpec
from deploy.engine.fleet import run_apply, run_rollback
from deploy.engine.host_run import RunOptions
from deploy.engine.journal import new_run_id
from deploy.engine.results import RunResult
from deploy.engine.status import HealthProbe, HostStatus, host_status
from deploy.remote.api import Host
from tests.unit.local_host import LocalHost


@dataclass
class LocalRig:
    """One local host (``local-1``) with its state_dir, and the workstation's files."""

    root: Path
    host_vars: dict[str, Any] = field(default_factory=dict)
    #: Every host the engine opened, for assertions on round trips or cleanup.
    opened: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        # state_dir's trust check wants every parent owned by us (or root) and not writable by
        # group or others: a private directory, never /tmp itself.
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.home = self.root / "home"
        self.files = self.root / "files"
        self.workstation = self.root / "workstation"
        for directory in (self.home, self.files, self.workstation):
            directory.mkdir(mode=0o700, exist_ok=True)
        self.state_dir = self.root / "state"
        self.inventory = self.workstation / "hosts.yaml"
        self.write_inventory()

    def write_inventory(self, **host_vars: Any) -> None:
        self.host_vars.update(host_vars)
        document = {
            "hosts": {
                "local-1": {
                    "address": "127.0.0.1",
                    "state_dir": str(self.state_dir),
                    "vars": dict(self.host_vars),
                }
            }
        }
        self.inventory.write_text(yaml.safe_dump(document, sort_keys=False))

    def open_host(self, name: str, spec: HostSpec, accept_new: bool) -> Host:
        host = LocalHost(name, home=str(self.home))
        self.opened.append(host)
        return host

    def playbook(self, name: str, steps: list[dict[str, Any]], **extra: Any) -> Path:
        path = self.workstation / f"{name}.yaml"
        document = {"name": name, "hosts": "all", **extra, "steps": steps}
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def apply(self, playbook: Path, *, check: bool = False, **resolve: Any) -> RunResult:
        inv = load.load_inventory(self.inventory)
        pb = load.load_playbook(playbook)
        plans = load.resolve(inv, pb, **resolve)
        options = RunOptions(
            run_id=new_run_id(),
            playbook=pb.playbook.name,
            check_mode=check,
            inventory=str(self.inventory),
            open_host=self.open_host,
        )
        return run_apply(plans, options)

    def rollback(self, target_run: str, *, force: bool = False) -> RunResult:
        hosts = load.resolve_hosts(load.load_inventory(self.inventory))
        return run_rollback(
            hosts,
            run_id=new_run_id(),
            target_run=target_run,
            force=force,
            open_host=self.open_host,
        )

    def status(self, health: HealthProbe | None = None) -> HostStatus:
        """`deploy status` of the host (``health``: e.g. `deploy.engine.status.sglang_health`)."""
        ((name, spec),) = load.resolve_hosts(load.load_inventory(self.inventory))
        return host_status(name, spec, health=health, open_host=self.open_host)

    def runs(self) -> list[str]:
        runs = self.state_dir / "runs"
        return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        text = (self.state_dir / "runs" / run_id / "journal.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def events(self, run_id: str) -> list[str]:
        return [str(e["event"]) for e in self.journal(run_id)]
