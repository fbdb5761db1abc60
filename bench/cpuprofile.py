"""Where the client's CPU goes: ``deploy`` run in-process under cProfile on every thread.

``python -m bench.cpuprofile OUT.pstats WORKDIR ARG...`` (``ARG...``: a ``deploy`` command line
without the executable). Every thread — the main one and each host's — gets a profiler of its
own timed by ``time.thread_time`` (the thread's CPU clock: a thread waiting on the network or
for the GIL costs nothing), and the stats of all of them are merged into ``OUT.pstats``. The
profiler inflates Python-heavy code several-fold, so the figures are shares, not milliseconds;
`bench.cpu` measures the milliseconds. `bench.cpu --profile N` sets up the hosts and runs this.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from typing import Any

_lock = threading.Lock()
_profiles: list[tuple[threading.Thread, cProfile.Profile]] = []


def _start(frame: Any, event: str, arg: Any) -> None:
    """`threading.setprofile`'s hook: on a new thread's first event, a profiler of its own
    replaces it (paramiko's transport threads override ``Thread.run``, so wrapping ``run``
    would miss them)."""
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append((threading.current_thread(), profile))
    profile.enable()


def main(argv: list[str]) -> int:
    out, workdir, command = argv[0], argv[1], argv[2:]
    threading.setprofile(_start)
    os.chdir(workdir)
    main_profile = cProfile.Profile(time.thread_time)
    status: object = None
    main_profile.enable()
    from deploy.cli import main as deploy_main

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            deploy_main(command, prog_name="deploy")
        except SystemExit as exc:
            status = exc.code
    main_profile.disable()
    stats = pstats.Stats(main_profile)
    for thread, other in _profiles:
        # A thread still running (the progress ticker's wait) is left out: closing its open
        # frames from here would read this thread's CPU clock, not its own.
        if not thread.is_alive():
            with contextlib.suppress(TypeError):  # a thread that never ran: no stats
                stats.add(other)
    stats.dump_stats(out)
    return 0 if status in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
