"""What a run produced, per step and per host: the values reports and history are made of."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from deploy.errors import (
    EXIT_CHANGES_PENDING,
    EXIT_NOT_ATTEMPTED,
    EXIT_OK,
    EXIT_ROLLBACK_FAILED,
    EXIT_ROLLED_BACK,
    worst_exit_code,
)
from deploy.masking import mask_argv, mask_data

StepStatus = Literal["changed", "unchanged", "ok", "would change", "failed", "skipped", "not run"]
Outcome = Literal[
    "changed",  # desired state reached, something changed
    "unchanged",  # already in the desired state
    "would change",  # --check: changes are needed
    "failed",  # a step failed before anything was changed: nothing to undo
    "rolled back",  # a step failed; every change was undone and checked
    "rollback failed",  # undo incomplete: a human must look (exit 3)
    "not attempted",  # unreachable, untrusted key, locked: nothing done (exit 4)
    "restored",  # deploy rollback: the run was undone as asked
    "nothing to do",  # rollback: no run to undo on this host
    "skipped",  # never touched: an earlier batch failed too much, or --timeout expired first (exit 4)
    "interrupted",  # --timeout expired mid-run: left for the next apply/rollback to undo (exit 3)
]

EXIT_BY_OUTCOME: dict[str, int] = {
    "changed": EXIT_OK,
    "unchanged": EXIT_OK,
    "would change": EXIT_OK,
    "nothing to do": EXIT_OK,
    "restored": EXIT_OK,
    "failed": EXIT_ROLLED_BACK,
    "rolled back": EXIT_ROLLED_BACK,
    "rollback failed": EXIT_ROLLBACK_FAILED,
    "not attempted": EXIT_NOT_ATTEMPTED,
    "skipped": EXIT_NOT_ATTEMPTED,
    "interrupted": EXIT_ROLLBACK_FAILED,
}

#: Version of the JSON report (``deploy apply --json``, ``--report``, history files); raised
#: only when a field changes meaning or disappears, never when one is added.
REPORT_FORMAT = 1


@dataclass
class StepResult:
    """One step on one host: its status, what it did, its diff and figures."""

    index: int
    kind: str
    title: str
    status: StepStatus
    summary: str = ""
    diff: str = ""
    duration: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class HostResult:
    """One host's run: its outcome, its steps, and any undo or recovery."""

    host: str
    outcome: Outcome = "unchanged"
    steps: list[StepResult] = field(default_factory=list)
    error: str | None = None
    failed_step: int | None = None
    #: One line per undo action (restored files, restarted services), in order.
    rollback: list[str] = field(default_factory=list)
    #: Unfinished earlier runs found on the host and undone before this run.
    recovered: list[str] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    duration: float = 0.0
    run_id: str | None = None
    ops: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_BY_OUTCOME[self.outcome]


@dataclass
class RunResult:
    """A whole command over its hosts: what the report, history and exit code come from."""

    run_id: str
    command: str
    playbook: str | None
    started: str
    check_mode: bool = False
    hosts: list[HostResult] = field(default_factory=list)
    duration: float = 0.0
    user: str = ""
    argv: list[str] = field(default_factory=list)
    #: Rolling batches (host names, in order) when the run had ``serial``; empty otherwise.
    batches: list[list[str]] = field(default_factory=list)
    #: Why hosts were left untouched on purpose (max_fail exceeded, --timeout), else None.
    stopped: str | None = None
    #: The inventory file's absolute path (``deploy rollback`` takes the latest run of it;
    #: ``deploy history`` lists the current one's runs).
    inventory: str | None = None
    #: ``deploy rollback``: the run it undid.
    target_run: str | None = None
    #: ``--check --detailed-exitcode``: pending changes make the exit code 5 (drift), not 0.
    detailed_exitcode: bool = False

    @property
    def pending(self) -> list[str]:
        """Hosts a ``--check`` found not in the desired state ("would change")."""
        return [h.host for h in self.hosts if h.outcome == "would change"]

    @property
    def exit_code(self) -> int:
        codes = [h.exit_code for h in self.hosts]
        if self.detailed_exitcode and self.pending:
            codes.append(EXIT_CHANGES_PENDING)
        return worst_exit_code(codes) if codes else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["exit_code"] = self.exit_code
        data["report_format"] = REPORT_FORMAT
        for host, raw in zip(self.hosts, data["hosts"], strict=True):
            raw["exit_code"] = host.exit_code
        # Every JSON rendering (--json, --report, history, the webhook) is made here: secrets
        # are masked here, once (deploy.masking).
        data["argv"] = mask_argv(self.argv)
        masked: dict[str, Any] = mask_data(data)
        return masked

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Read a report back; keys this version does not know (a newer writer's) are ignored."""
        hosts = []
        for raw in data.get("hosts", []):
            steps = [StepResult(**_known(StepResult, s)) for s in raw.get("steps", [])]
            hosts.append(HostResult(**{**_known(HostResult, raw), "steps": steps}))
        return cls(**{**_known(cls, data), "hosts": hosts})


def _known(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(kind)}
    return {key: value for key, value in data.items() if key in names}
