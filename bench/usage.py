"""What a timed process costs the workstation: CPU-seconds and memory of its whole tree.

**CPU-seconds** are ``RUSAGE_CHILDREN`` (user + system) read before and after the child: the
kernel adds a child's usage when it is reaped, and with it the usage of every descendant that
child reaped in turn (ansible's forks, a tool's worker processes). Nothing of the hosts is in
it (their sshd and shells are children of the daemons, not of the tool). A descendant that
outlives the run, detached (ansible's ControlPersist masters), is not counted.

**Memory** is the peak, over samples every `INTERVAL` seconds, of the resident set sizes
(``/proc/PID/statm``) summed over every process of the tree. ``RUSAGE_CHILDREN``'s
``ru_maxrss`` is only the largest single process, which hides a tool that forks one worker per
host, so the sum is what the page reports. It overcounts pages that forked processes still
share (copy-on-write, the interpreter's text), so for a forking tool it is an upper bound; for
a tool that runs its hosts on threads of one process it is exact. A process that lives
shorter than one interval can be missed.

The tree is found by session: the child is started in a session of its own
(``start_new_session``), and every process whose session id is the child's pid belongs to it.
Each sample lists ``/proc`` and reads the ``stat`` of pids not seen before only, so its cost
does not grow with the other processes on the machine.
"""

from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds between two samples of the tree's memory.
INTERVAL = 0.02
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_children() -> float:
    """User + system CPU-seconds of every reaped child of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def session_of(stat: str) -> int:
    """The session id in the text of ``/proc/PID/stat``.

    The command name (field 2) is in parentheses and may hold spaces or parentheses itself,
    so the fields are counted from the last ``)``: state, ppid, pgrp, session.
    """
    return int(stat[stat.rindex(")") + 1 :].split()[3])


def resident_bytes(statm: str, page: int = PAGE) -> int:
    """The resident set size in the text of ``/proc/PID/statm`` (its second field, in pages)."""
    return int(statm.split()[1]) * page


@dataclass
class TreeSampler:
    """Samples, on a thread of its own, the summed RSS of the processes of one session."""

    session: int
    proc: Path = Path("/proc")
    interval: float = INTERVAL
    #: The largest sum seen, in bytes, and the most processes seen in one sample.
    peak: int = 0
    processes: int = 0
    samples: int = 0
    _known: dict[int, bool] = field(default_factory=dict, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def _member(self, pid: int) -> bool:
        found = self._known.get(pid)
        if found is None:
            try:
                found = session_of((self.proc / str(pid) / "stat").read_text()) == self.session
            except (OSError, ValueError, IndexError):
                return False  # gone already, or not readable: not counted, asked again later
            self._known[pid] = found
        return found

    def sample(self) -> None:
        """One sample: the summed RSS of the session's live processes."""
        total, count = 0, 0
        for name in os.listdir(self.proc):
            if not name.isdigit() or not self._member(int(name)):
                continue
            try:
                total += resident_bytes((self.proc / name / "statm").read_text())
            except (OSError, ValueError, IndexError):
                continue  # exited between the listing and the read
            count += 1
        self.samples += 1
        self.peak = max(self.peak, total)
        self.processes = max(self.processes, count)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
