"""What every step shares: the lifecycle, the context it runs in, and what it reports.

Lifecycle (the engine drives it, one step at a time, on one host):

``plan(ctx)``
    Read what is needed (through ``ctx``, which fetches each file once per run) and compute the
    result locally. No side effects: ``--check`` is exactly the plans. Checks run here too, on
    the content as it will be, so ``--check`` already says whether verification would pass.
``apply(ctx, planned)``
    Make the change. Every change is announced in the journal (an ``intent`` record, fsynced)
    before it is made and confirmed after (``done``), so undo never depends on memory.
``verify(ctx, planned)``
    Prove the post-condition on the host. Raise `CheckFailed` when it does not hold.
undo
    Not a method: undo is driven by journal records (see `deploy.steps.files.undo_write`), so
    that a rollback after a crash, in another process, undoes exactly what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from deploy.config.steps import StepCommon, action_of, args_of
from deploy.remote.api import Host
from deploy.remote.session import Call
from deploy.remote.sftpfile import FileStat


class Recorder(Protocol):
    """The journal, as steps see it (implemented by `deploy.engine.journal.Journal`)."""

    run_id: str

    def write(self, event: dict[str, Any]) -> None: ...

    def save_copy(self, content: bytes) -> str: ...

    def guard(self, change: Call | None) -> None: ...


@dataclass
class FileState:
    """A file as we last saw or wrote it on the host (the per-run cache entry)."""

    path: str
    content: bytes
    stat: FileStat
    original: bytes  # as first read in this run: what a rollback must put back


@dataclass
class Planned:
    """What a step will do: a one-line summary, file changes with diffs, or nothing."""

    summary: str
    changes: list[FileChange] = field(default_factory=list)
    noop: bool = False
    #: Not applicable in this run (e.g. a health check when nothing was restarted).
    skipped: bool = False
    figures: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    #: A diff that is not a file's (a server's command line and environment, old -> new).
    diff: str = ""


@dataclass
class FileChange:
    path: str
    before: bytes
    after: bytes
    diff: str


@dataclass
class StepContext:
    """Everything a step may use on one host during one run."""

    host: str
    remote: Host
    journal: Recorder
    check_mode: bool = False
    state_dir: str = "/var/lib/deploy"
    vars: dict[str, Any] = field(default_factory=dict)
    files: dict[str, FileState] = field(default_factory=dict)
    #: Paths whose original content is saved in this run (sha256 per path).
    saved: dict[str, str] = field(default_factory=dict)
    #: Paths named by ``backup`` steps, saved just before the run's first change (so a run
    #: that changes nothing leaves nothing behind).
    pending_backups: list[str] = field(default_factory=list)
    #: Set by the engine: the step index being run, for journal records.
    step_index: int = -1
    #: Whether anything on the host was changed so far (rollback is needed on failure).
    changed: bool = False
    progress: Any = None
    #: The run's id, for logs and headers written on the host.
    run_id: str = ""
    #: Rendered services of the playbook, by name.
    services: dict[str, Any] = field(default_factory=dict)
    #: --force: stop a listener that does not look like the service's server.
    force: bool = False
    #: Steps after the current one (a restart looks ahead for a throughput baseline).
    upcoming: list[Any] = field(default_factory=list)
    #: Per-service facts of this run: started pid and log offset, baseline figures.
    runtime: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, message: str) -> None:
        """A progress line for the operator (long waits say what they are waiting for)."""
        if self.progress is not None:
            self.progress.host_event(self.host, message)

    def anything_changed(self) -> bool:
        """Whether this run changed (or, under --check, would change) anything so far."""
        return self.changed or any(f.content != f.original for f in self.files.values())


class Step:
    """Base of every step: holds the validated arguments; subclasses implement the lifecycle."""

    #: The action's key (``python_insert``...): a class default, set from the entry per step.
    kind: str = ""
    #: Whether the step may change the host (so a failure after it triggers rollback).
    mutating: ClassVar[bool] = False
    #: Whether ``verify`` may run under ``--check`` (read-only checks do; commands do not).
    runs_in_check_mode: ClassVar[bool] = False

    def __init__(self, entry: StepCommon, index: int) -> None:
        self.entry = entry
        self.index = index
        self.args: BaseModel = args_of(entry)
        self.kind = action_of(entry)

    @property
    def title(self) -> str:
        return self.entry.name or self.describe()

    def describe(self) -> str:
        """A short default title, e.g. ``python_insert KimiK25ForConditionalGeneration``."""
        return self.kind

    def preflight(self, ctx: StepContext) -> None:
        """Read-only checks run for every step before the run's first step, so that a host
        that cannot be served is refused with nothing touched (default: none)."""

    def plan(self, ctx: StepContext) -> Planned:
        raise NotImplementedError

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        """Default: nothing to do (read-only steps do their work in plan)."""

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        """Default: nothing more to prove."""
