"""Journal records: typed, versioned, and each carrying its own checksum.

One line of ``runs/<run-id>/journal.jsonl`` is one record, written as canonical JSON (sorted
keys, no spaces) with three envelope fields besides its own:

    v     the record format (`FORMAT`); a reader refuses a newer one rather than guess
    seq   its position in the journal, from 1: a missing or reordered line is damage
    sum   the first 16 hex digits of the sha256 of the canonical JSON of every other field

A crash can tear only the last line (the journal is append-only, each record one write), so a
last line without its newline is tolerated and dropped; any other line that does not parse,
whose sum does not match, or whose ``seq`` is out of place is damage (`JournalDamaged`), and
whoever reads the journal to undo something must refuse. Journals written before records had
a version (format 0: no ``v``, ``seq`` or ``sum``) are still read, line by line as JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from deploy.errors import RollbackFailed

#: The record format written by this version; raised when a field changes meaning.
FORMAT = 1


class JournalDamaged(RollbackFailed):
    """A journal line other than a torn last one is unreadable: undo must refuse (exit 3)."""

    def __init__(self, path: str, line: int, why: str) -> None:
        super().__init__(f"{path}:{line}: journal damaged: {why}; nothing was changed")
        self.path, self.line, self.why = path, line, why


@dataclass(frozen=True, kw_only=True)
class Record:
    """Fields every record has; ``EVENT`` names the kind on disk."""

    EVENT: ClassVar[str] = ""
    OP: ClassVar[str | None] = None
    ts: str = ""
    seq: int = 0

    def fields_dict(self) -> dict[str, Any]:
        """The record's own fields, as the undo code and the manifest read them."""
        data = {k: v for k, v in asdict(self).items() if v is not None}
        data["event"] = self.EVENT
        if self.OP is not None:
            data["op"] = self.OP
        return data


@dataclass(frozen=True, kw_only=True)
class Begin(Record):
    """First line: who started the run, and its place among the host's runs (``host_seq``)."""

    EVENT = "begin"
    run_id: str = ""
    playbook: str = ""
    host: str = ""
    user: str = ""
    workstation: str = ""
    pid: int = 0
    since: str = ""
    host_seq: int = 0


@dataclass(frozen=True, kw_only=True)
class Backup(Record):
    """A saved copy of ``path`` (content-addressed by ``sha256``), made before any change."""

    EVENT = "backup"
    path: str
    sha256: str
    step: int = 0


@dataclass(frozen=True, kw_only=True)
class WriteIntent(Record):
    """Fsynced before a file is written: enough to check and undo the write."""

    EVENT = "intent"
    OP = "write"
    step: int = 0
    path: str
    before: str
    after: str
    original: str
    mode: int
    uid: int
    gid: int
    size: int
    #: Extended attributes to restore with the bytes (POSIX ACLs and capabilities are xattrs;
    #: names to hex values, `deploy.hostpy.fileagent`); None in records written before them.
    xattrs: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class ServiceIntent(Record):
    """Fsynced before a service is stopped or started: its state before, to restore it."""

    EVENT = "intent"
    OP = "service"
    step: int = 0
    service: str
    action: str
    before: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Done(Record):
    """The change an intent announced is complete (``op``: what it was)."""

    EVENT = "done"
    op: str
    step: int = 0
    path: str | None = None
    service: str | None = None
    #: A service step's new server, as the undo must recognise it: pid, start (clock ticks
    #: after boot, /proc/PID/stat) and argv. An undo stops only a server its run started.
    started: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RollbackBegin(Record):
    """An undo of this run starts (every precondition was checked first); ``by``: whose."""

    EVENT = "rollback_begin"
    reason: str = ""
    force: bool = False
    by: str = ""


@dataclass(frozen=True, kw_only=True)
class Undone(Record):
    """One change of this run was put back (``action``: how)."""

    EVENT = "undone"
    op: str
    action: str = ""
    path: str | None = None
    service: str | None = None

    @property
    def target(self) -> str:
        return self.path or self.service or ""


@dataclass(frozen=True, kw_only=True)
class UndoFailed(Record):
    """An undo stopped half-way: what it had undone is in the ``undone`` lines before.

    ``interrupted``: it was cut short (a signal, the connection lost), so ``deploy rollback``
    may finish it. Otherwise it ran and failed (its target did not come up healthy): running
    it again would do the same, so the run waits for a human (`Resolved`). A record written
    before the field existed counts as failed.
    """

    EVENT = "rollback_failed"
    error: str = ""
    interrupted: bool = False


@dataclass(frozen=True, kw_only=True)
class Resolved(Record):
    """A human brought the host back after a failed undo (``deploy resolve``): the run is
    closed on this host. ``ts`` is when; ``by`` who (login user @ workstation); ``why`` their
    words; ``found`` what deploy saw on the host when they confirmed (checksums, server)."""

    EVENT = "resolved"
    by: str = ""
    why: str = ""
    found: str = ""


@dataclass(frozen=True, kw_only=True)
class End(Record):
    """The run finished: ``outcome`` ok (changes stand) or rolled_back (its own undo)."""

    EVENT = "end"
    outcome: str = "ok"


@dataclass(frozen=True, kw_only=True)
class RollbackEnd(Record):
    """An undo of this run completed: every change it made is put back."""

    EVENT = "rollback_end"
    outcome: str = "rolled_back"
    by: str = ""


_KINDS: dict[tuple[str, str | None], type[Record]] = {
    (k.EVENT, k.OP): k
    for k in (
        Begin,
        Backup,
        WriteIntent,
        ServiceIntent,
        Done,
        RollbackBegin,
        Undone,
        UndoFailed,
        Resolved,
        End,
        RollbackEnd,
    )
}
_BUILTIN = frozenset(_KINDS.values())


def register(kind: type[Record]) -> type[Record]:
    """Make a record kind readable (a step module's own kind; `deploy.steps.register` calls
    this for every record a step declares). The kinds above are always known, so that
    reading a journal never depends on which step modules are loaded.

    Raises:
        ValueError: another class already has the same ``EVENT`` and ``OP``.
    """
    key = (kind.EVENT, kind.OP)
    if _KINDS.setdefault(key, kind) is not kind:
        raise ValueError(f"record {kind.EVENT!r} op {kind.OP!r} is already {_KINDS[key].__name__}")
    return kind


def unregister(kind: type[Record]) -> None:
    """Forget a registered kind (a test's throwaway step); the built-in kinds stay."""
    if _KINDS.get((kind.EVENT, kind.OP)) is kind and kind not in _BUILTIN:
        del _KINDS[(kind.EVENT, kind.OP)]


def from_fields(data: Mapping[str, Any]) -> Record:
    """Build the typed record from a dict of its fields (``event`` and, for intents, ``op``).

    Fields this version does not know are dropped (a newer writer's additions).

    Raises:
        ValueError: unknown event, or a required field is missing or of the wrong type.
    """
    event = data.get("event")
    op = data.get("op") if event == "intent" else None
    kind = _KINDS.get((str(event), None if op is None else str(op)))
    if kind is None:
        raise ValueError(f"unknown record {event!r}" + (f" op {op!r}" if op else ""))
    names = {f.name for f in fields(kind)}
    try:
        record = kind(**{k: v for k, v in data.items() if k in names})
    except TypeError as exc:
        raise ValueError(f"{event} record: {exc}") from exc
    for f in fields(kind):
        value = getattr(record, f.name)
        if f.type in ("str", "int") and not isinstance(value, str if f.type == "str" else int):
            raise ValueError(f"{event} record: {f.name} is {type(value).__name__}")
    return record


def canonical(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data: bytes) -> str:
    """Hex sha256 of content: how files, saved copies and undo checks are identified (the
    ``sha256`` fields of these records)."""
    return hashlib.sha256(data).hexdigest()


def checksum(data: Mapping[str, Any]) -> str:
    """The ``sum`` of a record: over every field but ``sum`` itself."""
    body = {k: v for k, v in data.items() if k != "sum"}
    return hashlib.sha256(canonical(body)).hexdigest()[:16]


def encode(record: Record) -> bytes:
    """One journal line, newline included."""
    data = {**record.fields_dict(), "v": FORMAT}
    data["sum"] = checksum(data)
    return canonical(data) + b"\n"


def decode_line(text: str) -> Record:
    """One complete line back to its record.

    Raises:
        ValueError: not JSON, bad checksum, newer format, or not a known record.
    """
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    version = value.get("v", 0)
    if not isinstance(version, int) or version > FORMAT:
        raise ValueError(f"record format {version!r} is newer than this deploy's ({FORMAT})")
    if version >= 1 and value.get("sum") != checksum(value):
        raise ValueError("checksum mismatch")
    return from_fields(value)


@dataclass
class ParsedJournal:
    """A journal's records, and whether a torn last line was dropped."""

    path: str
    records: list[Record]
    torn_tail: bool = False
    #: The journal without its torn tail: what a writer appending to it must start from.
    valid: bytes = b""


def parse_journal(data: bytes, path: str) -> ParsedJournal:
    """Every record of a journal file, checked.

    Raises:
        JournalDamaged: a line other than a torn last one is unreadable or out of place.
    """
    pieces = data.split(b"\n")
    tail = pieces.pop()  # b"" when the file ends with its newline
    records: list[Record] = []
    for number, raw in enumerate(pieces, 1):
        try:
            record = decode_line(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise JournalDamaged(path, number, str(exc)) from exc
        expected = len(records) + 1
        if record.seq and record.seq != expected:
            raise JournalDamaged(
                path,
                number,
                f"record seq {record.seq} where {expected} belongs (a line is missing)",
            )
        records.append(record)
    return ParsedJournal(path, records, torn_tail=bool(tail), valid=data[: len(data) - len(tail)])
