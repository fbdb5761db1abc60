"""Where one ``deploy apply`` spends its time: a timeline of imports, SSH phases and operations.

Run as its own process (``python -m bench.profile WORKDIR ARG...``, from the repository root,
where ``ARG...`` is a ``deploy`` command line without the executable) so
that it pays the same interpreter start and imports as the real command. It imports the
modules ``deploy apply`` needs one by one, timing each, then wraps — at runtime, without
editing ``deploy`` — the functions that touch the network (connect, key exchange,
authentication, each exec and SFTP call, lock, release), runs the command in-process exactly
as the console script would, and prints one JSON document on stdout:

``{"spans": [[thread, label, start, end], ...], "wire": {...}, "elapsed": s}``

Times are seconds since this module started. ``wire`` counts what really crossed the
connection, from paramiko itself: channels opened (each exec is one, SFTP is one per
connection) and SFTP requests by type (a pipelined read of a large file is several READs),
and how many of those requests were waited for one at a time (each a full round trip, which
is what a slow network multiplies). Those are the numbers to compare with deploy's own
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
import sys  # noqa: E402
import threading  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

#: What ``deploy apply`` imports, in the order it does (cli first, then inside the command,
#: then what the first connection imports lazily). Each is timed as a span.
IMPORTS = (
    "deploy.cli",
    "deploy.config.load",
    "deploy.engine.fleet",
    "deploy.engine.host_run",
    "deploy.engine.journal",
    "fabric",
    "deploy.steps (every step module, as build_step imports them)",
    "deploy.report.human",
    "deploy.engine.history",
)
#: What `deploy.steps.build_step` imports on its first call, inside the first host's thread.
STEP_MODULES = (
    "files",  # EditStep: plan/apply of every file-editing step
    "append",
    "backup",
    "gate_throughput",
    "patch",
    "python_insert",
    "service",
    "smoke",
    "verify_command",
    "verify_python",
    "verify_tail",
    "wait_healthy",
)

_lock = threading.Lock()
spans: list[tuple[str, str, float, float]] = []
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


def wrap(owner: Any, attribute: str, label: str | Callable[..., str]) -> None:
    """Replace ``owner.attribute`` with a version that records a span around each call."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = _now()
        try:
            return original(*args, **kwargs)
        finally:
            _record(label(*args, **kwargs) if callable(label) else label, began)

    setattr(owner, attribute, timed)


def count(owner: Any, attribute: str, key: Callable[..., str]) -> None:
    """Replace ``owner.attribute`` with a version that counts each call under ``key(...)``."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            wire[key(*args, **kwargs)] += 1
        return original(*args, **kwargs)

    setattr(owner, attribute, counted)


def instrument() -> None:
    """Wrap the network-facing functions of paramiko and deploy (imported by now)."""
    import paramiko
    from paramiko.sftp import CMD_NAMES
    from paramiko.sftp_client import SFTPClient

    import deploy.config.load as load
    import deploy.engine.fleet as fleet
    import deploy.engine.history as history
    import deploy.engine.host_run as host_run
    import deploy.remote.host as host
    import deploy.remote.lock as lock
    import deploy.remote.ssh as ssh

    wrap(load, "load_inventory", "config: load inventory")
    wrap(load, "load_playbook", "config: load playbook")
    wrap(load, "resolve", "config: resolve vars and steps")
    wrap(fleet, "run_apply", "engine: run_apply (all hosts)")
    wrap(history, "save", "workstation: save history")
    wrap(ssh, "open_connection", "ssh: connect (all of it)")
    wrap(paramiko.Transport, "start_client", "ssh: banner + key exchange")
    wrap(paramiko.Transport, "auth_publickey", "ssh: public-key auth")
    wrap(host_run, "acquire", "lock: exec until READY")
    wrap(lock.HostLock, "release", "lock: release (EOF, wait exit)")
    wrap(host.RemoteHost, "run", lambda self, command, **_: _exec_label(command))
    for name in ("stat", "read", "write_atomic", "mkdir", "remove", "listdir"):
        wrap(host.RemoteHost, name, f"sftp: {name}")
    wrap(host.RemoteHost, "append_file", "journal line (+ fsync)")
    wrap(host.RemoteHost, "close", "ssh: close")
    # Pure CPU work on the GIL, done once per host: parsing the ~28 KB model file.
    wrap(ast, "parse", "cpu: ast.parse")
    from deploy.steps.base import Step

    for name in STEP_MODULES:
        module = sys.modules.get(f"deploy.steps.{name}")
        if module is not None:
            _wrap_steps(module.__name__, vars(module).values(), Step)
    count(paramiko.Transport, "open_session", lambda *a, **k: "channel opened")
    count(
        SFTPClient,
        "_async_request",
        lambda self, fileobj, t, *a: "sftp " + CMD_NAMES.get(t, str(t)),
    )
    # A request sent through _request is waited for before the next one: a full round trip.
    count(SFTPClient, "_request", lambda *a, **k: "waited sftp requests")


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


def _wrap_steps(module: str, values: Any, base: type) -> None:
    """Time plan/apply/verify of every step class defined in ``module`` (its own methods)."""
    for value in values:
        if isinstance(value, type) and issubclass(value, base) and value.__module__ == module:
            for phase in ("plan", "apply", "verify"):
                if phase in vars(value):
                    wrap(value, phase, lambda step, *_, p=phase, **__: f"step {step.kind}: {p}")


def main(argv: list[str]) -> int:
    workdir, command = argv[1], argv[2:]
    for module in IMPORTS:
        began = _now()
        names = [module]
        if module.startswith("deploy.steps "):
            names = [f"deploy.steps.{name}" for name in STEP_MODULES]
        for name in names:
            with contextlib.suppress(ImportError):  # the tree moves; a renamed module is fine
                importlib.import_module(name)
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
        "elapsed": _now(),
        "exit_status": status,
        "cpu": cpu,
    }
    print(json.dumps(document))
    return 0 if status in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
