"""``deploy resolve RUN``: a human brought a host back after a failed undo; close the run there.

An undo that ran and failed (its target did not come up healthy) is never retried: every apply
and rollback on that host refuses until a human has looked (`deploy.statedir.runs`). This is
how they say they have.

It also closes a run left unfinished or half undone whose undo will not run (it refuses to
stop a server the run did not start), once a human put the host back.

First the host is read, without its lock (like ``deploy status``):
the run's state there, each file the run wrote with its sha256 now and whether that is the
content from before the run, the run's, or neither, and each service the run touched (what
serves its port, and whether it answers its health check). Then, once confirmed, the lock is
taken, the run's state is read again (another operator may have resolved it meanwhile), and
one ``resolved`` record is appended to its journal: who, when, why, and what was seen. That
closes the run on that host; nothing else is changed.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass, field
from typing import Any

from deploy.engine.journal import attach, read_journal
from deploy.errors import DeployError, HostNotAttempted, InputError
from deploy.remote.api import Host
from deploy.remote.lock import acquire
from deploy.statedir.records import Resolved, ServiceIntent, WriteIntent, sha256
from deploy.statedir.runs import RunState, summarize

#: Runs a human may close: an undo that failed, and — when the undo refuses to touch a server
#: it did not start, or a human put the host back before the undo ran — a run left unfinished
#: or half undone (``deploy rollback`` would otherwise finish those).
OPEN = frozenset({RunState.UNDO_FAILED, RunState.UNFINISHED, RunState.UNDOING})


def resolver() -> str:
    """Who resolves: the workstation's login user and host name."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


@dataclass
class Findings:
    """One host as the resolve command found it."""

    host: str
    #: The run's state there ("undo failed" is the one that may be resolved), or why not read.
    state: str = ""
    error: str | None = None
    #: One line per file and per service the run touched.
    lines: list[str] = field(default_factory=list)

    @property
    def resolvable(self) -> bool:
        return self.error is None and self.state in {str(s) for s in OPEN}

    def summary(self) -> str:
        return "; ".join(self.lines)[:2000]


def _file_line(remote: Host, intents: list[WriteIntent]) -> str:
    first, last = intents[0], intents[-1]
    try:
        now = sha256(remote.read(first.path))
    except FileNotFoundError:
        return f"{first.path}: missing"
    if now == first.before:
        what = "as before the run"
    elif now == last.after:
        what = "as the run left it"
    else:
        what = "changed since (neither before nor after the run)"
    return f"{first.path}: sha256 {now[:16]}, {what}"


def _service_line(remote: Host, state_dir: str, intent: ServiceIntent) -> str:
    from deploy.services.undo import serving

    return f"{intent.service}: {serving(remote, state_dir, intent.service, intent.fields_dict())}"


def inspect(remote: Host, state_dir: str, run_id: str) -> Findings:
    """What ``run_id`` left on the host, read without the lock; changes nothing."""
    found = Findings(remote.name)
    try:
        remote.open()
        records = read_journal(remote, state_dir, run_id).records
    except (HostNotAttempted, InputError) as exc:
        found.error = f"not attempted: {exc}"
        return found
    except DeployError as exc:
        found.error = str(exc)
        found.state = "absent" if "no run" in str(exc) else ""
        return found
    found.state = str(summarize(run_id, records).state)
    writes: dict[str, list[WriteIntent]] = {}
    services: dict[str, ServiceIntent] = {}
    for record in records:
        if isinstance(record, WriteIntent):
            writes.setdefault(record.path, []).append(record)
        elif isinstance(record, ServiceIntent):
            services.setdefault(record.service, record)
    try:
        found.lines = [_file_line(remote, intents) for intents in writes.values()]
        found.lines += [_service_line(remote, state_dir, s) for s in services.values()]
    except DeployError as exc:
        found.error = f"could not read the host: {exc}"
    return found


def record(
    remote: Host,
    state_dir: str,
    run_id: str,
    *,
    why: str,
    found: Findings,
    holder: dict[str, Any],
) -> str:
    """Append the ``resolved`` record under the lock; one line saying what was done.

    Raises:
        DeployError: the host could not be locked or written (nothing was recorded), or the
            run is no longer waiting for a human there (someone resolved it meanwhile).
    """
    lock = acquire(remote, state_dir, holder)
    try:
        parsed = read_journal(remote, state_dir, run_id)
        state = summarize(run_id, parsed.records).state
        if state not in OPEN:
            raise DeployError(f"{remote.name}: run {run_id} is {state} now; nothing recorded")
        journal = attach(remote, state_dir, parsed, run_id)
        try:
            journal.write(Resolved(by=resolver(), why=why[:1000], found=found.summary()))
        finally:
            journal.close()
        remote.flush()
    finally:
        lock.release()
    return f"{remote.name}: run {run_id} closed: resolved by {resolver()}"
