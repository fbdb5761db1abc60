"""The write-ahead journal and the saved copies of one run on one host.

What the records are, and where they live, is `deploy.statedir` (records typed, versioned and
checksummed; the layout). This module writes and reads them through a small sink, so *how* the
bytes reach the host is one class: `HelperSink`, which sends them to the host's file helper
over the run's session without waiting (`deploy.remote.hostfiles`), and falls back to SFTP
where no session is held.

An ``intent`` record is fsynced *before* the change it announces, so a rollback — by this
process, or by a later one after a crash — knows every change that may have happened; a
``done`` record follows the change. Records whose loss in a crash changes nothing (`_LAZY`:
begin, backup, done) are appended without an fsync of their own: they become durable with the
next fsynced record of the same file — an intent precedes every change, an end every finish —
and recovery treats an intent without its done as "may have happened" anyway, checking the
file's checksum (or the service) before undoing. The run directory is created lazily at the
first change: a run that changes nothing leaves no run behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from deploy.engine.holder import now_iso as now_iso  # where callers found it
from deploy.engine.runid import new_run_id as new_run_id  # where callers found it
from deploy.errors import RollbackFailed, StepFailed
from deploy.remote.api import Host
from deploy.remote.calls import Call
from deploy.statedir.layout import Layout
from deploy.statedir.records import (
    Begin,
    ParsedJournal,
    Record,
    encode,
    from_fields,
    parse_journal,
    sha256,
)


def now_precise() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def run_dir(state_dir: str, run_id: str) -> str:
    return Layout(state_dir).run_dir(run_id)


#: Records appended without their own fsync (see the module docstring): one round trip and one
#: disk flush each, saved on every change run.
_LAZY = frozenset({"begin", "backup", "done"})


class JournalSink(Protocol):
    """How a run's records and saved copies reach the host: the one place that knows."""

    def append(self, line: bytes, *, durable: bool) -> Call | None: ...

    def save_copy(self, name: str, content: bytes, source: str | None = None) -> Call | None: ...

    def replace_journal(self, body: bytes) -> None: ...

    def write_manifest(self, body: bytes) -> None: ...

    def close(self) -> None: ...


class HelperSink:
    """`JournalSink` through the host's file helper (`Host.append_file`, `write_atomic`).

    While the lock is held every request rides the run's session without waiting: the helper
    serves them in order (an intent is appended and fsynced before the change it announces),
    and the run waits once, at its commit point (`Journal.finish`). The run directory is
    created with the first record.
    """

    def __init__(self, remote: Host, layout: Layout, run_id: str, *, create: bool) -> None:
        self.remote, self.layout, self.run_id = remote, layout, run_id
        self._create = create

    def _ready(self) -> None:
        if self._create:
            self._create = False
            self.remote.mkdir(self.layout.run_dir(self.run_id))
            self.remote.mkdir(self.layout.copies(self.run_id))

    def append(self, line: bytes, *, durable: bool) -> Call | None:
        self._ready()
        return self.remote.append_file(self.layout.journal(self.run_id), line, durable=durable)

    def save_copy(self, name: str, content: bytes, source: str | None = None) -> Call | None:
        self._ready()
        copy = f"{self.layout.copies(self.run_id)}/{name}"
        known = None if source is None else (source, content)
        return self.remote.write_atomic(copy, content, mode=0o600, known=known)

    def replace_journal(self, body: bytes) -> None:
        self.remote.write_atomic(self.layout.journal(self.run_id), body, mode=0o600)

    def write_manifest(self, body: bytes) -> None:
        self.remote.write_atomic(self.layout.manifest(self.run_id), body, mode=0o600)

    def close(self) -> None:
        """Nothing to release: the host's helper keeps the journal open until the run ends."""


class Journal:
    """Appends records to ``runs/<run-id>/journal.jsonl`` on the host; created on first use.

    ``events`` keeps every record written (and, when attached to an earlier run, read) as a
    dict of its fields, which the undo code and the manifest read.
    """

    def __init__(
        self,
        remote: Host,
        state_dir: str,
        run_id: str,
        meta: Mapping[str, Any],
        *,
        existing: ParsedJournal | None = None,
    ) -> None:
        self.remote = remote
        self.state_dir = state_dir
        self.layout = Layout(state_dir)
        self.run_id = run_id
        self.meta = dict(meta)
        self.dir = self.layout.run_dir(run_id)
        self.sink: JournalSink = HelperSink(remote, self.layout, run_id, create=existing is None)
        self._started = existing is not None
        self._saved: set[str] = set()
        #: Copies made on the host from the file itself: the bytes, and the request.
        self._copies: dict[str, tuple[bytes, Call | None]] = {}
        self.records: list[Record] = list(existing.records) if existing else []
        self.events: list[dict[str, Any]] = [r.fields_dict() for r in self.records]
        #: Per record written in this run, the helper request that appended it (None when it
        #: was read from the host, or written without the lock's session).
        self._calls: list[Call | None] = [None] * len(self.records)
        #: Per record index, the change it announces (an intent's write), when sent ahead.
        self._guards: dict[int, Call] = {}
        #: Records the host's journal holds (or will, once sent): the next one's ``seq`` is
        #: this plus one. Not ``len(self.records)``: `settle` forgets an intent whose change
        #: the host refused, but the host appended that intent, and its place is taken.
        self._seq = len(self.records)

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Write the ``begin`` record (idempotent); the sink creates the run directory."""
        if self._started:
            return
        self._started = True
        names = {f.name for f in dataclasses.fields(Begin)}
        self.write(Begin(**{k: v for k, v in self.meta.items() if k in names}))

    def write(self, event: Record | Mapping[str, Any]) -> None:
        """Append one record; fsync it (and every one before it) unless its kind is lazy.

        A dict is checked into its typed record first (`deploy.statedir.records.from_fields`).
        """
        self.start()
        record = event if isinstance(event, Record) else from_fields(event)
        self._seq += 1
        record = dataclasses.replace(record, ts=now_precise(), seq=self._seq)
        self.records.append(record)
        self.events.append(record.fields_dict())
        self._calls.append(None)
        self._calls[-1] = self.sink.append(encode(record), durable=record.EVENT not in _LAZY)

    def guard(self, change: Call | None) -> None:
        """Tie the last record (an intent) to the request making its change: if the host
        refused that change, the target was not touched and the intent is forgotten too."""
        if change is not None and self.events:
            self._guards[len(self.events) - 1] = change

    def settle(self) -> None:
        """Wait for every answer, then forget the records the host did not append.

        Records are sent without waiting; after a failed write the host skips everything
        sent after it (`deploy.remote.session`) — later saved copies and intents included. An
        undo must work from what the host has, not from what was sent: an intent the host
        never recorded announces a change that never happened, with no saved copy behind it.

        Raises:
            HostUnreachable: the connection was lost (the host's journal says what happened).
        """
        with contextlib.suppress(StepFailed):
            self.remote.flush()
        kept = []
        for index, call in enumerate(self._calls):
            change = self._guards.get(index)
            if call is not None and call.done and not call.ok:
                self._seq -= 1  # the host did not append it: its place is free
                continue
            if change is not None and change.done and not change.ok:
                continue  # its change was refused or failed: the target is untouched
            kept.append(index)
        backups = {e["sha256"]: e for e in self.events if e.get("event") == "backup"}
        self.records = [self.records[i] for i in kept]
        self.events = [self.events[i] for i in kept]
        self._calls = [self._calls[i] for i in kept]
        self._guards = {}
        self._resend_copies(backups)

    def _resend_copies(self, backups: dict[str, dict[str, Any]]) -> None:
        """A copy the host was to make from the file itself, refused because the file no
        longer held what the run read (someone's edit between the read and the write, which
        the write itself refuses too): the run still holds those bytes, so they are sent whole
        and recorded, and the original is not lost with the refused run."""
        for digest, (content, call) in list(self._copies.items()):
            if call is None or not call.done or call.ok or call.skipped:
                continue
            del self._copies[digest]
            resent = self.sink.save_copy(digest, content)
            with contextlib.suppress(StepFailed):
                self.remote.flush()
            if digest in backups and resent is not None and resent.ok:  # recorded once there
                self.write({k: v for k, v in backups[digest].items() if k not in ("ts", "seq")})
                with contextlib.suppress(StepFailed):
                    self.remote.flush()

    def save_copy(self, content: bytes, source: str | None = None) -> str:
        """Store ``content`` as ``files/<sha256>`` (atomically, once per run); return the sha.
        ``source``: the file on the host that holds ``content``, copied there instead of sent."""
        digest = sha256(content)
        if digest not in self._saved:
            self.start()
            call = self.sink.save_copy(digest, content, source)
            if source is not None:
                self._copies[digest] = (content, call)
            self._saved.add(digest)
        return digest

    def finish(self, record: Record, manifest: list[dict[str, Any]] | None = None) -> None:
        """Write the final record (`End` or `RollbackEnd`) and, if given, manifest.json; then
        wait for every answer: the run's commit point (its one wait for the writes).

        Raises:
            StepFailed: a record, saved copy or write sent earlier failed on the host.
        """
        if not self._started:
            return
        if manifest is not None:
            body = json.dumps({"run_id": self.run_id, "files": manifest}, indent=2, sort_keys=True)
            self.sink.write_manifest(body.encode() + b"\n")
        self.write(record)
        self.close()
        self.remote.flush()

    def close(self) -> None:
        self.sink.close()


def read_journal(remote: Host, state_dir: str, run_id: str) -> ParsedJournal:
    """Every record of a run's journal, checked (a torn last line from a crash is dropped).

    Raises:
        StepFailed: the run does not exist on this host.
        JournalDamaged: any other line is damaged (exit 3: undo must not guess).
    """
    path = Layout(state_dir).journal(run_id)
    try:
        raw = remote.read(path)
    except FileNotFoundError as exc:
        raise StepFailed(f"{remote.name}: no run {run_id} in {state_dir}/runs") from exc
    return parse_journal(raw, f"{remote.name}:{path}")


def attach(remote: Host, state_dir: str, parsed: ParsedJournal, run_id: str) -> Journal:
    """A `Journal` that appends to an existing run (the undo of an earlier run).

    A torn last line is dropped first (the journal is rewritten, atomically, without it), so
    the next record starts on a line of its own and only a new crash can tear the end again.
    """
    journal = Journal(remote, state_dir, run_id, {}, existing=parsed)
    if parsed.torn_tail:
        journal.sink.replace_journal(parsed.valid)
    return journal


def read_copy(remote: Host, state_dir: str, run_id: str, digest: str) -> bytes:
    """A saved copy, checked against its name.

    Raises:
        RollbackFailed: missing, or its content does not hash to its name (corrupted).
    """
    path = Layout(state_dir).copy(run_id, digest)
    try:
        data = remote.read(path)
    except FileNotFoundError as exc:
        raise RollbackFailed(f"{remote.name}: saved copy {path} is missing") from exc
    if sha256(data) != digest:
        raise RollbackFailed(f"{remote.name}: saved copy {path} is corrupted (sha256 mismatch)")
    return data
