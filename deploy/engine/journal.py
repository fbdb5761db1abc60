"""The write-ahead journal and the saved copies of one run on one host.

Layout under ``state_dir`` (DESIGN.md)::

    runs/<run-id>/journal.jsonl   one JSON object per line: begin, intent, done, ..., end
    runs/<run-id>/manifest.json   each file touched: path, sha256 before/after, mode, uid, gid, size
    runs/<run-id>/files/<sha256>  saved copies, content-addressed
    services/<name>.log, .pid     servers deploy started itself (manager: process)
    compiled/<sha256>             passed compile checks: the interpreter identity they passed
                                  with (deploy.checks.compile; a cache, safe to delete)

An ``intent`` line is fsynced *before* the change it announces, so a rollback — by this
process, or by a later one after a crash — knows every change that may have happened; a
``done`` line follows the change. Lines whose loss in a crash changes nothing (`_LAZY`: begin,
backup, done) are appended without an fsync of their own: they become durable with the next
fsynced line of the same file — an intent precedes every change, an end every finish — and
recovery treats an intent without its done as "may have happened" anyway, checking the file's
checksum (or the service) before undoing. The run directory is created lazily at the first change: a run that changes
nothing leaves no run behind (at most the one-line record of a compile check it passed).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from datetime import UTC, datetime
from typing import Any

from deploy.errors import StepFailed
from deploy.remote.host import RemoteHost, sha256
from deploy.remote.session import Call


def new_run_id() -> str:
    """A sortable, unique run id: UTC time to the second plus 6 hex digits."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_dir(state_dir: str, run_id: str) -> str:
    return f"{state_dir.rstrip('/')}/runs/{run_id}"


#: Events appended without their own fsync (see the module docstring): one round trip and one
#: disk flush each, saved on every change run.
_LAZY = frozenset({"begin", "backup", "done"})


class Journal:
    """Appends to ``runs/<run-id>/journal.jsonl`` on the host; created on first use."""

    def __init__(
        self, remote: RemoteHost, state_dir: str, run_id: str, meta: dict[str, Any]
    ) -> None:
        self.remote = remote
        self.state_dir = state_dir
        self.run_id = run_id
        self.meta = meta
        self.dir = run_dir(state_dir, run_id)
        self._started = False
        self._saved: set[str] = set()
        self.events: list[dict[str, Any]] = []
        #: Per event, the helper request that appended it (None without the lock's session).
        self._calls: list[Call | None] = []

    @property
    def started(self) -> bool:
        return self._started

    @property
    def path(self) -> str:
        return f"{self.dir}/journal.jsonl"

    def start(self) -> None:
        """Create the run directory and write the ``begin`` line (idempotent).

        Sent without waiting, like every record: the host's helper serves them in order.
        """
        if self._started:
            return
        self.remote.mkdir(self.dir)
        self.remote.mkdir(f"{self.dir}/files")
        self._started = True
        self.write({"event": "begin", **self.meta})

    def write(self, event: dict[str, Any]) -> None:
        """Append one line; fsync it (and so every line before it) unless it is in `_LAZY`."""
        self.start()
        line = {"ts": now_iso(), **event}
        self.events.append(line)
        self._calls.append(None)
        self._calls[-1] = self.remote.append_file(
            self.path,
            (json.dumps(line, sort_keys=True) + "\n").encode(),
            durable=event.get("event") not in _LAZY,
        )

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
        kept = [
            (event, call)
            for event, call in zip(self.events, self._calls, strict=True)
            if call is None or not call.done or call.ok
        ]
        self.events = [event for event, _ in kept]
        self._calls = [call for _, call in kept]

    def save_copy(self, content: bytes) -> str:
        """Store ``content`` as ``files/<sha256>`` (atomically, once per run); return the sha."""
        digest = sha256(content)
        if digest not in self._saved:
            self.start()
            self.remote.write_atomic(f"{self.dir}/files/{digest}", content, mode=0o600)
            self._saved.add(digest)
        return digest

    def finish(
        self, event: str, outcome: str, manifest: list[dict[str, Any]] | None = None
    ) -> None:
        """Write the final line (``end`` or ``rollback_end``) and, if given, manifest.json;
        then wait for every answer: the run's commit point (its one wait for the writes).

        Raises:
            StepFailed: a record, saved copy or write sent earlier failed on the host.
        """
        if not self._started:
            return
        if manifest is not None:
            body = json.dumps({"run_id": self.run_id, "files": manifest}, indent=2, sort_keys=True)
            self.remote.write_atomic(f"{self.dir}/manifest.json", body.encode() + b"\n", mode=0o600)
        self.write({"event": event, "outcome": outcome})
        self.close()
        self.remote.flush()

    def close(self) -> None:
        """Nothing to release: the host's helper keeps the journal open until the run ends."""


def attach(remote: RemoteHost, state_dir: str, run_id: str) -> Journal:
    """A `Journal` that appends to an existing run (rollback of an earlier run)."""
    journal = Journal(remote, state_dir, run_id, {})
    journal._started = True
    return journal


def read_events(remote: RemoteHost, state_dir: str, run_id: str) -> list[dict[str, Any]]:
    """Every complete line of a run's journal (a torn last line from a crash is skipped).

    Raises:
        StepFailed: the run does not exist on this host.
    """
    path = f"{run_dir(state_dir, run_id)}/journal.jsonl"
    try:
        raw = remote.read(path)
    except FileNotFoundError as exc:
        raise StepFailed(f"{remote.name}: no run {run_id} in {state_dir}/runs") from exc
    events = []
    for line in raw.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                events.append(value)
    return events


def read_copy(remote: RemoteHost, state_dir: str, run_id: str, digest: str) -> bytes:
    """A saved copy, checked against its name.

    Raises:
        StepFailed: missing, or its content does not hash to its name (corrupted).
    """
    path = f"{run_dir(state_dir, run_id)}/files/{digest}"
    try:
        data = remote.read(path)
    except FileNotFoundError as exc:
        raise StepFailed(f"{remote.name}: saved copy {path} is missing") from exc
    if sha256(data) != digest:
        raise StepFailed(f"{remote.name}: saved copy {path} is corrupted (sha256 mismatch)")
    return data
