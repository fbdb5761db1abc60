"""What every step shares: the lifecycle, the context it runs in, and what it reports.

Lifecycle (the engine drives it, one step at a time, on one host):

``preflight(ctx)``
    Read-only checks of every step, before the run's first step: a host that cannot be served
    is refused with nothing touched.
``before_first_change(ctx)``
    Called for every step once, just before the run's first change to the host (a file
    written, a server stopped; never under ``--check``): what must be seen of the host as it
    was — the throughput gate's baseline on the old server.
``plan(ctx)``
    Read what is needed (through ``ctx``, which fetches each file once per run) and compute the
    result locally. No side effects: ``--check`` is exactly the plans. Checks run here too, on
    the content as it will be, so ``--check`` already says whether verification would pass.
``apply(ctx, planned)``
    Make the change. Every change is announced in the journal (an ``intent`` record, fsynced)
    before it is made and confirmed after (``done``), so undo never depends on memory.
``verify(ctx, planned)``
    Prove the post-condition on the host. Raise `CheckFailed` when it does not hold. A check
    whose verdict is its exit status on the host may instead be sent with the commit
    (`StepContext.check_on_host`): the run then waits once for it and the commit together.
undo
    Driven by journal records, not by the step object: a rollback after a crash, in another
    process, undoes exactly what happened. A step declares the intent records it writes
    (``records``) and the `RecordUndo` that reverses them (``undo_handler``); the rollback
    dispatches each pending intent to the handler of its ``op`` (`deploy.steps.undo_for`).

A step type is one module: its arguments model (the class is generic over it, so ``self.args``
is typed), its documented ``example``, the lifecycle above, ``reads`` (the files it will read,
which the engine hands to the host to fetch ahead) and its journal records. `deploy.steps`
lists the modules and derives the config union, the docs and the JSON Schema from them.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from deploy.config.steps import StepCommon, args_of
from deploy.statedir.records import Record

if TYPE_CHECKING:  # the remote layer is heavy to import: validation never needs it
    from deploy.remote.api import Host
    from deploy.remote.calls import Call, FileStat

ArgsT = TypeVar("ArgsT", bound=BaseModel)


class Recorder(Protocol):
    """The journal, as steps see it (implemented by `deploy.engine.journal.Journal`)."""

    run_id: str

    def write(self, event: Record | Mapping[str, Any]) -> None: ...

    def save_copy(self, content: bytes, source: str | None = None) -> str: ...

    def guard(self, change: Call | None) -> None: ...


@dataclass
class FileState:
    """A file as we last saw or wrote it on the host (the per-run cache entry)."""

    path: str
    content: bytes
    stat: FileStat
    original: bytes  # as first read in this run: what a rollback must put back
    #: The file did not exist before this run (`deploy.steps.create`): undo removes it.
    created: bool = False
    #: A step that may change files behind the cache (not `Step.confined`: a command, a
    #: restart) ran since the read: the host's file may no longer hold ``original``.
    stale: bool = False


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
class HostCheck:
    """A step's check sent to the host without waiting (`StepContext.check_on_host`).

    Its verdict is its exit status on the host, 0 for a pass — the one the host's session
    also acts on, skipping the commit behind a failed check — so the client can never judge
    otherwise than the host did. ``explain`` only words it once answered: (exit status,
    stdout, stderr) -> the step's summary when 0, else why the check failed.
    """

    step_index: int
    call: Call
    explain: Callable[[int, str, str], str]


@dataclass
class FileChange:
    """A file a step changed: its bytes before and after, and the diff the report shows."""

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
    #: The engine's phase (`deploy.engine.step_run.Phase`): "preflight", "before first
    #: change", "change", "verify" or "commit".
    phase: str = "preflight"
    #: Set by the engine: runs every step's ``before_first_change``; called once, by
    #: `first_change`.
    on_first_change: Callable[[], None] | None = None
    #: Whether `first_change` has run.
    first_change_seen: bool = False
    #: Per-service facts of this run: started pid and log offset, baseline figures.
    runtime: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Set by the engine before each step: whether a check may go with the commit
    #: (`check_on_host`) — not under --check, and every later step is `Step.answered_locally`.
    checks_with_commit: bool = False
    #: Checks sent with the commit and not judged yet (`deploy.engine.verdicts`).
    host_checks: list[HostCheck] = field(default_factory=list)

    def note(self, message: str) -> None:
        """A progress line for the operator (long waits say what they are waiting for)."""
        if self.progress is not None:
            self.progress.host_event(self.host, message)

    def check_on_host(
        self, command: str, *, timeout: float, explain: Callable[[int, str, str], str]
    ) -> bool:
        """Send ``command``, a check whose verdict is its exit status, to be judged with the
        commit; False when it cannot go (then the step runs it now, and waits).

        Only for a check the host can decide alone: exit status 0 passes, anything else
        fails, and nothing in its output changes that (``explain`` words the verdict, never
        reverses it). The host skips what follows a failed check, the commit record included;
        the engine then fails this step and rolls the host back (`deploy.engine.verdicts`).
        And only for a short check of deploy's own: once the commit is sent behind it, a
        cancel that comes while it runs no longer stops the commit.

        Raises:
            HostUnreachable: the connection was lost.
        """
        if not self.checks_with_commit or self.check_mode:
            return False
        call = self.remote.send_check(command, timeout=timeout)
        if call is None:
            return False
        self.host_checks.append(HostCheck(self.step_index, call, explain))
        return True

    def first_change(self) -> None:
        """Say the run is about to make its first change to the host: the engine's "before the
        first change" phase runs now (once; every later call returns at once)."""
        if self.first_change_seen:
            return
        self.first_change_seen = True
        if self.on_first_change is not None:
            self.on_first_change()

    def files_may_change(self) -> None:
        """A step that may change files behind the run's cache is about to run: no file read
        so far is known to be on the host as read any longer (`FileState.stale`)."""
        for state in self.files.values():
            state.stale = True

    def anything_changed(self) -> bool:
        """Whether this run changed (or, under --check, would change) anything so far."""
        return self.changed or any(f.content != f.original for f in self.files.values())


class RecordUndo:
    """Undo of one kind of change (one intent ``op``), from its journal records alone.

    One instance per rollback of one run on one host. The rollback calls, for every handler
    of the run's pending intents: ``check`` (all of them, before anything is touched: a
    refusal leaves the host as it was), then ``release`` (all of them: e.g. stop the server
    that runs the new code), then ``restore`` in ascending ``phase`` (files before services:
    the old server must start on the old files). ``records`` are the pending intents of this
    handler's ``op``, oldest first.
    """

    #: The intent ``op`` this handler undoes (``write``, ``service``).
    op: ClassVar[str] = ""
    #: Order of ``restore`` among handlers: lower first.
    phase: ClassVar[int] = 0

    def __init__(
        self,
        remote: Host,
        state_dir: str,
        run_id: str,
        *,
        force: bool,
        saved_copy: Callable[[str], bytes],
        note: Callable[[str], None] | None = None,
        journal: list[dict[str, Any]] | None = None,
    ) -> None:
        self.remote, self.state_dir, self.run_id = remote, state_dir, run_id
        #: The run's saved copy with that sha256, checked (`RollbackFailed` if it is not).
        self.saved_copy = saved_copy
        self.force, self.note = force, note
        #: Every record of the run's journal (``done`` ones too: what its changes produced).
        self.journal = list(journal or [])

    def check(self, records: list[dict[str, Any]]) -> None:
        """Raise `RollbackFailed` if these changes cannot be undone; touch nothing."""

    def release(self, records: list[dict[str, Any]]) -> list[str]:
        """What must go before anything is restored; one line per action."""
        return []

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        """Put back what ``records`` changed, journaling an ``undone`` record per target."""
        return []


def _args_model(cls: type) -> type[BaseModel] | None:
    """The ``X`` of ``class S(Step[X])`` (or of any generic step base), if concrete."""
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Step):
            for arg in typing.get_args(base):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    return arg
    return None


class Step(Generic[ArgsT]):
    """Base of every step: holds the validated arguments; subclasses implement the lifecycle.

    A concrete step names its action and its arguments model once::

        class PatchStep(EditStep[PatchArgs]):
            kind = "patch"
            example = '''- patch: {path: /etc/x.conf, diff: ...}'''

    and registers with `deploy.steps.register` (the built-in modules are listed there).
    """

    #: The action's key (``python_insert``...).
    kind: ClassVar[str] = ""
    #: The arguments model, taken from the generic parameter (``Step[PatchArgs]``).
    args_model: ClassVar[type[BaseModel] | None] = None
    #: A YAML list of one or more steps using the action, shown in docs/playbooks.md and loaded
    #: by the tests in the documentation's example playbook (`tools.docgen_examples`).
    example: ClassVar[str] = ""
    #: Journal record types this step writes (`deploy.statedir.records`); the intents among
    #: them are undone by ``undo_handler()``.
    records: ClassVar[tuple[type[Record], ...]] = ()
    #: Whether the step may change the host (so a failure after it triggers rollback).
    mutating: ClassVar[bool] = False
    #: Whether ``verify`` may run under ``--check`` (read-only checks do; commands do not).
    runs_in_check_mode: ClassVar[bool] = False
    #: Whether the step touches nothing on the host but the files ``reads()`` names (and runs
    #: only its own ``speculate()`` commands). The run's leading such steps have their reads
    #: fetched with the lock; any other step may change files behind the cache, so before it
    #: runs, whatever was fetched ahead and not yet used is dropped.
    confined: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        model = _args_model(cls)
        if model is not None:
            cls.args_model = model

    def __init__(self, entry: StepCommon, index: int) -> None:
        self.entry = entry
        self.index = index
        args = args_of(entry)
        if self.args_model is not None and not isinstance(args, self.args_model):
            raise TypeError(f"{type(self).__name__} takes {self.args_model.__name__}")
        self.args: ArgsT = args  # type: ignore[assignment]  # checked against args_model

    @classmethod
    def undo_handler(cls) -> type[RecordUndo] | None:
        """The handler that undoes this step's intent records (None: it writes none)."""
        return None

    @classmethod
    def undo_handlers(cls) -> list[type[RecordUndo]]:
        """One handler per intent ``op`` this step writes (a step that may create a file
        writes ``write``, ``create`` and ``mkdir`` intents). Default: ``undo_handler()``."""
        handler = cls.undo_handler()
        return [] if handler is None else [handler]

    def reads(self) -> list[str]:
        """Absolute paths of the files this step will read (default: none)."""
        return []

    def speculate(self, state_dir: str) -> list[str]:
        """Read-only commands whose answers this step can use if run ahead with the lock.

        They travel in the lock's command line, which other users of the host can read
        (`deploy.remote.lock.CARRIED_OPS`): code and paths only, never a secret.
        """
        return []

    def answered_locally(self, ctx: StepContext) -> bool:
        """Whether this step, in this run, waits for no answer from the host: it judges bytes
        the run already holds (``ctx.files``) and sends at most a check that goes with the
        commit (`StepContext.check_on_host`). Such steps may run while the checks sent
        before them are unanswered; a step before them may then send its check with the
        commit. Default: no (a change, a playbook's command, a service)."""
        return False

    @property
    def title(self) -> str:
        return self.entry.name or self.describe()

    def describe(self) -> str:
        """A short default title, e.g. ``python_insert KimiK25ForConditionalGeneration``."""
        return self.kind

    def preflight(self, ctx: StepContext) -> None:
        """Read-only checks run for every step before the run's first step, so that a host
        that cannot be served is refused with nothing touched (default: none)."""

    def before_first_change(self, ctx: StepContext) -> None:
        """What this step must see of the host before the run's first change to it (default:
        nothing). Not called under ``--check``, nor in a run that changes nothing."""

    def plan(self, ctx: StepContext) -> Planned:
        raise NotImplementedError

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        """Default: nothing to do (read-only steps do their work in plan)."""

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        """Default: nothing more to prove."""
