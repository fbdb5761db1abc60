"""Where one ``deploy apply`` spends its time: a timeline of imports, SSH phases and operations.

Run as its own process (``python -m bench.profile WORKDIR ARG...``, from the repository root,
where ``ARG...`` is a ``deploy`` command line without the executable) so
that it pays the same interpreter start and imports as the real command. It imports the
modules ``deploy apply`` needs one by one, timing each, then subscribes to the spans deploy
emits at its own wire and phase boundaries (`deploy.trace`: connect, lock, release, each
command on the host, each wait for the file helper, each step's plan/apply/verify), wraps
paramiko's public API for the key exchange, authentication and what crossed the wire, runs
the command in-process exactly as the console script would, and prints one JSON document on
stdout:

``{"spans": [[thread, label, start, end], ...], "wire": {...}, "elapsed": s}``

Times are seconds since this module started. ``wire`` counts what really crossed the
connection, from paramiko itself: channels opened (each exec is one, SFTP is one per
connection) and SFTP requests by method, each waited for (a full round trip, which is what
a slow network multiplies). Those are the numbers to compare with deploy's own
``ops`` counters.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import gc  # noqa: E402

gc.disable()  # as `deploy.cli.main` does for start-up; `startup_done` turns it back on

import ast  # noqa: E402
import contextlib  # noqa: E402  (the clock above must start before any import)
import functools  # noqa: E402
import importlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pkgutil  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

#: What ``deploy apply`` imports, in the order it does (cli first, then inside the command,
#: then what the first connection imports lazily). Each is timed as a span. ``deploy.steps``
#: stands for every module of that package (`deploy.steps.build_step` imports them lazily,
#: inside the first host's thread): found by walking the package, not listed here.
IMPORTS = (
    "deploy.cli",
    "deploy.config.load",
    "deploy.engine.fleet",
    "deploy.engine.host_run",
    "deploy.engine.journal",
    "fabric",
    "deploy.steps",
    "deploy.report.human",
    "deploy.engine.history",
)
#: How the spans `deploy.trace` emits are labelled on docs/performance.md (name -> label);
#: ``host.run`` and ``step.*`` are labelled from their detail (`_label`).
LABELS = {
    "config.load_inventory": "config: load inventory",
    "config.load_playbook": "config: load playbook",
    "config.resolve": "config: resolve vars and steps",
    "engine.run_apply": "engine: run_apply (all hosts)",
    "history.save": "workstation: save history",
    "ssh.connect": "ssh: login (connect too, unless made ahead)",
    "lock.acquire": "lock: exec until READY",
    "lock.release": "lock: release (EOF, wait exit)",
    "session.wait": "helper: wait for answers",
    "host.check": "cmd: check sent, answered with the commit",
    "host.close": "ssh: close",
}

_lock = threading.Lock()
spans: list[tuple[str, str, float, float]] = []
#: The `deploy.trace` span names seen (what the hooks still emit: tests/integration/test_profile.py).
names: set[str] = set()
wire: Counter[str] = Counter()


def _now() -> float:
    return time.perf_counter() - STARTED


def _record(label: str, began: float) -> None:
    with _lock:
        spans.append((threading.current_thread().name, label, began, _now()))


def _exec_label(command: str) -> str:
    """`RemoteHost.run`: a cmd in the lock's shell while the lock is held (always, in apply)."""
    if "flock" in command:
        return "exec: lock + scan journals"
    if "compile(" in command:
        return "cmd: compile on the host"
    return "cmd: " + command.split()[0][:30] if command.split() else "cmd"


def _label(name: str, detail: str) -> str:
    if name == "host.run":
        return _exec_label(detail)
    if name.startswith("step."):
        return f"step {detail}: {name.removeprefix('step.').replace('_', ' ')}"
    return LABELS.get(name, name)


def on_span(name: str, detail: str, start: float, end: float) -> None:
    """`deploy.trace` listener: one span, in this module's clock."""
    with _lock:
        names.add(name)
        spans.append(
            (threading.current_thread().name, _label(name, detail), start - STARTED, end - STARTED)
        )


def wrap(owner: Any, attribute: str, label: str) -> None:
    """Replace ``owner.attribute`` (a public paramiko or stdlib function) with a version that
    records a span around each call. Never used on deploy's own code: deploy says where its
    boundaries are through `deploy.trace`."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = _now()
        try:
            return original(*args, **kwargs)
        finally:
            _record(label, began)

    setattr(owner, attribute, timed)


def count(owner: Any, attribute: str, keys: tuple[str, ...]) -> None:
    """Replace ``owner.attribute`` (public paramiko API) with a version that counts each call
    under every key in ``keys``."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            for key in keys:
                wire[key] += 1
        return original(*args, **kwargs)

    setattr(owner, attribute, counted)


#: The SFTPClient methods that each send one request and wait for its answer (paramiko's
#: public API). Writes and reads of file contents go through the host's file helper
#: (`deploy.hostpy.fileagent`), which the ``helper: wait for answers`` span times.
SFTP_REQUESTS = (
    "stat",
    "lstat",
    "open",
    "listdir",
    "listdir_attr",
    "remove",
    "rename",
    "posix_rename",
    "mkdir",
    "rmdir",
    "chmod",
    "chown",
    "utime",
    "readlink",
    "symlink",
    "normalize",
)


def instrument() -> None:
    """Subscribe to deploy's spans; wrap paramiko's public API for what crossed the wire."""
    import paramiko

    from deploy import trace

    trace.subscribe(on_span)
    wrap(paramiko.Transport, "start_client", "ssh: banner + key exchange")
    wrap(paramiko.Transport, "auth_publickey", "ssh: public-key auth")
    # Pure CPU work on the GIL, done once per host: parsing the ~28 KB model file.
    wrap(ast, "parse", "cpu: ast.parse")
    count(paramiko.Transport, "open_session", ("channel opened",))
    for name in SFTP_REQUESTS:
        count(paramiko.SFTPClient, name, (f"sftp {name}", "waited sftp requests"))


def cpu_busy_seconds() -> float:
    """CPU-seconds all cores of the machine spent busy since boot (``/proc/stat``).

    On loopback the hosts' sshd, login shells and interpreters share the workstation's
    cores, so busy time during a run, minus this process's own CPU time, is what the hosts
    (and anything else running) cost.
    """
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def main(argv: list[str]) -> int:
    workdir, command = argv[1], argv[2:]
    for module in IMPORTS:
        began = _now()
        imported = importlib.import_module(module)
        if module == "deploy.steps":
            for info in pkgutil.iter_modules(imported.__path__, "deploy.steps."):
                importlib.import_module(info.name)
        _record(f"import {module}", began)
    instrument()
    from deploy.cli import main as deploy_main

    os.chdir(workdir)
    out = io.StringIO()
    busy, own = cpu_busy_seconds(), own_cpu_seconds()
    began = _now()
    status: object = None
    with contextlib.redirect_stdout(out):
        try:
            deploy_main(command, prog_name="deploy")
        except SystemExit as exc:
            status = exc.code
    _record("deploy apply (in-process)", began)
    cpu = {
        "wall": _now() - began,
        "machine busy": cpu_busy_seconds() - busy,
        "deploy process": own_cpu_seconds() - own,
        "cores": os.cpu_count() or 1,
    }
    document = {
        "spans": spans,
        "wire": dict(wire),
        "trace": sorted(names),
        "elapsed": _now(),
        "exit_status": status,
        "cpu": cpu,
    }
    print(json.dumps(document))
    return 0 if status in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
