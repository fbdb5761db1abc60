"""Finding and killing every process a sandbox started, however it detached.

A sandbox host's sessions fork shells, and tests start servers with ``setsid nohup`` that
leave the daemon's process tree. Each session carries a marker variable (`MARKER_VAR`, set
by sshd from the daemon's config), so those are found by their environment; the rest are
found as descendants of the daemon. Read from /proc: ``ps`` and ``pkill`` may be absent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

#: The variable that marks every process started through one sandbox daemon (its value).
MARKER_VAR = "DEPLOY_SANDBOX_ID"
#: Seconds between SIGTERM and SIGKILL, and between SIGKILL and giving up.
STOP_TIMEOUT = 5.0
#: Seconds between two looks at /proc while waiting.
POLL = 0.005


class SurvivedKill(RuntimeError):
    """A process survived SIGKILL (the caller words it for its own context)."""


def doomed(roots: set[int], tokens: set[str]) -> tuple[set[int], dict[int, int]]:
    """Live pids of ``roots``, their descendants and the processes marked with ``tokens``.

    Also returns pid -> ppid of every live process. Read from /proc (``ps`` may be absent);
    zombies count as dead.
    """
    wanted = {f"{MARKER_VAR}={token}".encode() for token in tokens}
    table: dict[int, int] = {}
    found: set[int] = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            if stat[0] != "Z":  # (the command name before ")" may itself contain ") ")
                table[int(entry)] = int(stat[1])
                environ = Path(f"/proc/{entry}/environ").read_bytes() if wanted else b""
                if wanted.intersection(environ.split(b"\0")):
                    found.add(int(entry))
        except OSError:
            continue  # exited while we looked
    children: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    stack = [pid for pid in roots if pid in table]
    while stack:
        found.add(pid := stack.pop())
        stack.extend(children.get(pid, []))
    found.discard(os.getpid())
    return found, table


def kill_trees(roots: set[int], tokens: set[str], timeout: float = STOP_TIMEOUT) -> None:
    """Kill ``roots``, their descendants and the processes marked with ``tokens``, leaves first.

    Leaves first so that every process dies while its parent is alive to reap it: no ``sshd``
    zombies are left for ``pgrep`` to show. The set is recomputed each round, as a dying
    session can still spawn. SIGTERM first, SIGKILL for whatever remains after ``timeout``.

    Raises:
        SurvivedKill: something survived SIGKILL too.
    """
    term_until = time.monotonic() + timeout
    signalled: dict[int, int] = {}
    while True:
        alive, table = doomed(roots, tokens)
        if not alive:
            return
        now = time.monotonic()
        if now > term_until + timeout:
            raise SurvivedKill(f"processes survived SIGKILL: {sorted(alive)}")
        if now < term_until:
            targets, sig = alive - {table[pid] for pid in alive}, signal.SIGTERM
        else:
            targets, sig = alive, signal.SIGKILL
        for pid in targets:
            if signalled.get(pid) != sig:
                signalled[pid] = sig
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        time.sleep(POLL)
