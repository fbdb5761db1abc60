"""SGLang's child processes: ``sglang::scheduler_TP<rank>`` per GPU and ``sglang::detokenizer``.

Each is exec'ed under its SGLang title (`BOOTSTRAP`, so ``pgrep -f launch_server`` misses them
as it misses SGLang's), registers its "GPU memory" where the fake ``nvidia-smi`` reads it, and
exits with its parent, unless ``orphan_scheduler``: then a scheduler ignores SIGTERM, outlives
the main process and keeps its listening socket open until SIGKILLed. A child that dies makes
the main process kill the tree, itself included (`watch_children`), as SGLang does.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from .standin_config import HERE, STOP, log

#: Children run this rather than this file, so ``pgrep -f launch_server`` misses them, as it
#: misses SGLang's (a reason to stop the server by process group).
BOOTSTRAP = (
    "import json,os,sys;c=json.loads(os.environ.pop('_SGLANG_STANDIN_CHILD'));"
    "sys.path.insert(0,c['path']);__import__(c['module'],fromlist=['x'])._child_main(c)"
)


class Child(NamedTuple):
    process: subprocess.Popen[bytes]
    channel: socket.socket | None  # a scheduler's: where the listening socket is sent


def spawn_children(args: argparse.Namespace, config: dict[str, Any]) -> list[Child]:
    """One scheduler per TP rank and a detokenizer, each exec'ed under its SGLang title."""
    children = []
    titles = [f"sglang::scheduler_TP{rank}" for rank in range(args.tp_size)]
    for rank, title in enumerate([*titles, "sglang::detokenizer"]):
        scheduler = rank < args.tp_size
        ours, theirs = socket.socketpair() if scheduler else (None, None)
        spec = {
            "title": title,
            "path": str(HERE.parent),
            "module": "sglang.standin_children",
            "parent": os.getpid(),
            "orphan": scheduler and config["orphan_scheduler"],
            "gpu_index": rank if scheduler else None,
            "fd": theirs and theirs.fileno(),
            "state_dir": config["gpu_state_dir"],
            "memory_mib": config["gpu_memory_mib"],
        }
        process = subprocess.Popen(
            [title, "-c", BOOTSTRAP],
            executable=sys.executable,
            stdin=subprocess.DEVNULL,
            env={
                **os.environ,
                "_SGLANG_STANDIN_CHILD": json.dumps(spec),
                # argv[0] is the title, not a path: without a home, Python looks for its
                # standard library from the cwd up, and from "/" finds the system's instead.
                "PYTHONHOME": f"{sys.base_prefix}:{sys.base_exec_prefix}",
            },
            pass_fds=[theirs.fileno()] if theirs else [],
        )
        if theirs:
            theirs.close()
        children.append(Child(process, ours))
    return children


def watch_children(children: list[Child], config: dict[str, Any]) -> None:
    """SGLang's SIGQUIT from a dying child: the main process kills the tree, itself included."""
    while not STOP["children"]:
        if any(child.process.poll() is not None for child in children):
            if STOP["children"]:
                return
            log(
                "Received sigquit from a child process. It usually means the child failed.",
                stream=sys.stderr,
            )
            stop_children(children, config["orphan_scheduler"], kill=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)


def stop_children(children: list[Child], orphan: bool, kill: bool = False) -> None:
    """TERM (or KILL) the children and reap them, sparing the schedulers if they orphan."""
    STOP["children"] = True
    stopping = [child for child in children if not (orphan and child.channel)]
    for child in stopping:
        child.process.kill() if kill else child.process.terminate()
    deadline = time.monotonic() + 2.0
    for child in stopping:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
    for child in children:
        if child.channel:
            child.channel.close()


def _child_main(spec: dict[str, Any]) -> None:
    """A scheduler or detokenizer: hold "GPU memory", exit with the parent unless orphaned."""
    with contextlib.suppress(OSError, AttributeError):  # best effort: /proc/self/comm
        ctypes.CDLL(None).prctl(15, spec["title"].encode()[:15], 0, 0, 0)  # PR_SET_NAME
    for signum in (signal.SIGTERM, signal.SIGINT):  # no handler: they die at SIGTERM
        signal.signal(signum, signal.SIG_IGN if spec["orphan"] else signal.SIG_DFL)
    registration = None
    if spec["gpu_index"] is not None:  # nvidia-smi ignores it once this pid is gone or reused
        registration = Path(spec["state_dir"]) / str(os.getpid())
        registration.parent.mkdir(parents=True, exist_ok=True)
        start_time = (
            Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
            if Path("/proc/self/stat").exists()
            else None
        )
        temporary = registration.with_name(f".{os.getpid()}.tmp")
        temporary.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "name": spec["title"],
                    "used_memory_mib": spec["memory_mib"],
                    "gpu_index": spec["gpu_index"],
                    "start_time": start_time,
                }
            )
        )
        temporary.replace(registration)
    held: list[int] = []  # the parent's listening socket, kept open for as long as we live
    if spec["fd"] is not None:
        channel = socket.socket(fileno=spec["fd"])
        threading.Thread(target=_receive_fds, args=(channel, held), daemon=True).start()
    try:
        while not STOP["requested"] and (spec["orphan"] or os.getppid() == spec["parent"]):
            time.sleep(0.1)
    finally:
        if registration is not None:
            registration.unlink(missing_ok=True)


def _receive_fds(channel: socket.socket, held: list[int]) -> None:
    """Keep the parent's listening socket, sent once it is bound (never, if it is not)."""
    with contextlib.suppress(OSError):
        held.extend(socket.recv_fds(channel, 1, 1)[1])
