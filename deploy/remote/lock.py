"""The per-host lock: ``state_dir/lock``, held with flock(1) by a process tied to our session.

One exec takes the lock and reports what the engine needs first: every run kept on the host
(``deploy/hostsh/scan.sh``: unfinished runs found with no round trip more) and the status and
bytes of the files the leading file steps read (``prefetch``). The shell holding the flock then
serves the run's commands on the same channel (`deploy.remote.session`) until its stdin ends,
so the kernel frees the lock the moment our SSH session ends, cleanly or not: no dead run
leaves it behind (a command still running keeps it until it ends), and the holder's
description stays in the file for the next run to report. A run finding it held waits up to a
second (the last run may still be ending its shell) before it reports the holder.

Round trips: taking it waits for the channel's open and the lock's answer, which brings the
prefetched files and the commands sent ahead; releasing waits for nothing. What is sent ahead
travels in the exec's command line: sshd opens a session channel with a zero window and
grants one only with the exec's reply, so stdin would cost a round trip more (``$_dZ`` in
``deploy/hostsh/loop.sh``). Any user of the host can read a command line, so only paths and
check code travel so (`CARRIED_OPS`), never contents.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from deploy import hostsh, trace
from deploy.checks.compile import AHEAD_VARIABLE
from deploy.errors import (
    HostUnreachable,
    LockHeld,
    PermissionDenied,
    StateDirDenied,
    StateDirUntrusted,
    StepFailed,
)
from deploy.remote.api import Host
from deploy.remote.calls import CallFailed, NoHelper, SessionLost
from deploy.remote.hostfiles import HELPER_SOURCE, fetch_answer
from deploy.remote.session import Session
from deploy.remote.transport import Channel
from deploy.statedir.layout import parse_scan
from deploy.statedir.runs import RunInfo, ordered


def lock_script(state_dir: str, holder: str, *, ahead: str = "", agent: str = "") -> str:
    """The lock's exec: ``deploy/hostsh/lock.sh`` after the quoted assignments of what varies:
    state_dir, the holder's JSON, the requests carried (``ahead``) and the helper's source."""
    return hostsh.program("lock.sh", {"_dS": state_dir, "_dA": agent, "_dH": holder, "_dZ": ahead})


#: The requests that may travel in the lock's command line (module docstring: never data,
#: such as a write's bytes, a record, an environment); the rest goes on stdin.
CARRIED_OPS = frozenset({"read"})

#: The largest lock script that carries requests in its command line. Linux bounds one
#: argument at 128 KiB (MAX_ARG_STRLEN) and the script is one (``$SHELL -c``; under become,
#: sudo's, after `deploy.remote.become` quoted it again: each ``'`` becomes 5 characters).
#: Requests that would make it larger go on stdin, one round trip later, as before.
MAX_COMMAND = 96 * 1024


def _carried(script: str) -> bool:
    """True if ``script`` stays under `MAX_COMMAND` even once quoted again by become; in bytes,
    as the kernel counts an argument (a path's non-ASCII characters take up to 4 each)."""
    return len(script.encode()) + 4 * script.count("'") <= MAX_COMMAND


@dataclass
class HostLock:
    """A held lock; ``release()`` (or closing the connection) frees it."""

    remote: Host
    channel: Channel
    previous_holder: dict[str, object] | None
    #: Every run kept on the host, oldest first (`deploy.statedir.runs.ordered`).
    runs: list[RunInfo]

    @trace.spanned("lock.release")
    def release(self) -> None:
        """End the command loop (EOF on its stdin) and close the channel, without waiting.

        The run's outcome is durable by now (a run waits for its answers at commit; anything
        still pending is waited for here), so the shell's exit status would tell nothing, and
        waiting for it cost a round trip per host (issue 17); the next run waits for the flock
        to be freed (module docstring).
        """
        session = self.remote.session
        if session is not None and session.channel is self.channel:
            self.remote.session = None
        else:
            session = None
        self.remote.forget_read_ahead()
        try:
            if session is not None:
                with contextlib.suppress(CallFailed, NoHelper, SessionLost):
                    session.wait(timeout=30)
            self.channel.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError):
            pass
        finally:
            self.channel.close()


def _holder_text(raw: str) -> dict[str, object] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _scanned(lines: list[str]) -> list[RunInfo]:
    """The runs the lock script's scan printed before ``READY``."""
    return ordered(parse_scan(lines[: lines.index("READY")] if "READY" in lines else lines))


def describe_holder(holder: dict[str, object] | None) -> str:
    if not holder:
        return "another run (no details recorded)"
    return (
        f"run {holder.get('run_id', '?')} by {holder.get('user', '?')}@{holder.get('workstation', '?')} "
        f"(pid {holder.get('pid', '?')}) since {holder.get('since', '?')}"
    )


@trace.spanned("lock.acquire")
def acquire(
    remote: Host,
    state_dir: str,
    holder: dict[str, object],
    timeout: float | None = None,
    prefetch: Sequence[str] = (),
    speculate: Sequence[str] = (),
) -> HostLock:
    """Take ``state_dir/lock`` on the host, or raise `LockHeld` naming the holder.

    ``prefetch``: files the run will read, sent to the file helper with the lock's exec and
    kept for `RemoteHost.fetch`: no round trip of their own. ``speculate``: commands whose
    answers the run may use if nothing changed first (the compile check of a file it may leave
    as it is), run after them in the same round trip with
    `deploy.checks.compile.AHEAD_VARIABLE` set, so that a command may answer from what is
    recorded only rather than do work a change run would throw away. ``timeout``: seconds of
    silence before the host counts as not answering (default: the host's ``lock_timeout``).

    Raises:
        HostUnreachable: the host stayed silent for ``timeout`` seconds.
        LockHeld: another run holds the lock (nothing was changed).
        StateDirUntrusted: state_dir, a parent, or its lock could be changed by another user.
        StepFailed: the state directory cannot be created; no flock(1), or no python3 (helper).
    """
    if timeout is None:  # a `Host` without settings: ConnectSettings.lock_timeout's default
        timeout = float(getattr(getattr(remote, "settings", None), "lock_timeout", 60.0))
    paths = list(dict.fromkeys(prefetch))
    # Held, not sent: the shell reads them once it holds the lock and serves its loop (a busy
    # lock discards them unread), so reading costs no round trip of its own.
    session = Session(None, remote.ops)
    calls = [session.call({"op": "read", "path": path}) for path in paths]
    ahead = [
        (command, session.send_run(f"{AHEAD_VARIABLE}=1; {command}", timeout=120))
        for command in dict.fromkeys(speculate)
    ]
    held, holder_json = session.held(), json.dumps(holder, sort_keys=True)
    # Carried in the command line (module docstring), unless a NUL cannot be a shell word
    # (the frames are JSON and UTF-8 encoded text: always UTF-8).
    paths_only = all(
        call.command or call.args.get("op") in CARRIED_OPS
        for call in [*calls, *dict(ahead).values()]
    )
    carried = held.decode() if paths_only and b"\0" not in held else ""
    script, unsent = lock_script(state_dir, holder_json, ahead=carried, agent=HELPER_SOURCE), b""
    if not carried or not _carried(script):
        script, unsent = lock_script(state_dir, holder_json, agent=HELPER_SOURCE), held
    channel = remote.start(script)
    session.attach(channel)
    remote.ops["wait"] = remote.ops.get("wait", 0) + 1  # the lock's answer, prefetch included
    lost = _send_ahead(channel, unsent)
    lines: list[str] = []
    cut = f"{remote.name}: connection lost while taking the lock"
    try:  # read as the session reads answers: what follows READY is theirs
        while "READY" not in lines:  # silence is what times out
            lines.append(session.read_line(time.monotonic() + timeout).decode("utf-8", "replace"))
    except SessionLost as exc:
        if session.ended_at is None:  # not ended (a refusal ends it): silent
            channel.close()
            raise HostUnreachable(
                f"{remote.name}: no answer for {timeout:g} s while taking the lock in "
                f"{state_dir} (a slow login shell? raise the host's lock_timeout)"
            ) from exc
    except (paramiko.SSHException, OSError, EOFError) as exc:
        channel.close()
        raise HostUnreachable(f"{cut}: {exc}") from exc
    text = "\n".join(lines)
    first = lines[0] if lines else ""
    if first.startswith("LOCKED") and "NORELAY" in lines:  # no fifo: stdin it is
        lines.remove("NORELAY")
        lost = _send_ahead(channel, held)
    if lost is not None and (first.startswith("LOCKED") or not text.strip()):
        channel.close()
        raise HostUnreachable(f"{cut}: {lost}") from lost
    if first.startswith("LOCKED"):
        previous = _holder_text(first.partition("\t")[2])
        runs = _scanned(lines[1:])
        remote.session = session
        try:  # the prefetched files' answers, already on their way
            session.wait(timeout, counted=True)
        except CallFailed:
            pass  # a file the helper could not read is left out: its step's own read says why
        except NoHelper as exc:
            raise StepFailed(f"{remote.name}: {exc}") from exc
        except SessionLost as exc:
            raise HostUnreachable(
                f"{remote.name}: connection lost while reading files: {exc}"
            ) from exc
        files = {
            path: fetch_answer(path, call)
            for path, call in zip(paths, calls, strict=True)
            if call.ok
        }
        ran = {  # command -> (exit status, stdout, stderr) of what was sent ahead and answered
            command: (int(call.answer["status"]), call.payload, str(call.answer["stderr"]))
            for command, call in ahead
            if call.ok and call.answer is not None
        }
        remote.prefetched, remote.speculated = files, ran
        return HostLock(remote, channel, previous, runs)
    channel.close()
    if first.startswith("BUSY"):
        holder_info = _holder_text(first.partition("\t")[2])
        raise LockHeld(f"{remote.name}: locked by {describe_holder(holder_info)}; nothing was done")
    if first.startswith("UNTRUSTED"):
        _, path, why = [*first.split("\t"), "", ""][:3]
        raise StateDirUntrusted(
            f"{remote.name}: state_dir untrusted: {path} {why}; nothing was read or done there"
        )
    if first.startswith("NOFLOCK"):
        raise StepFailed(f"{remote.name}: flock(1) is not installed on the host (util-linux)")
    if first.startswith("NOSTATE"):
        said = first.partition(" ")[2]
        if "Permission denied" in said:  # nothing was done: "not attempted", exit 4
            path = said.split(":", 1)[0].removeprefix("cannot create ").removeprefix("cannot open ")
            denied = PermissionDenied(
                remote.name, path, remote.acting_user, remote.become is not None
            )
            raise StateDirDenied(str(denied))
        raise StepFailed(f"{remote.name}: {said} (state_dir {state_dir})")
    raise StepFailed(
        f"{remote.name}: could not take the lock in {state_dir}: {text.strip()[:200] or 'no output'}"
    )


def _send_ahead(channel: Channel, data: bytes) -> SessionLost | None:
    """Send requests held for the lock's shell on its stdin; the failure, if the link broke (a
    shell that refused exits without reading them: only without its answer was it the link)."""
    try:
        if data:
            channel.sendall(memoryview(data))
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return SessionLost(str(exc) or type(exc).__name__)
    return None
