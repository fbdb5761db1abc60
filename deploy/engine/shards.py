"""How many worker processes a fleet runs in, which one takes the next host, and the frames
they talk in. Pure logic (`deploy.engine.workers` runs the processes).

Hosts run on threads, and paramiko's packet handling, the AST edits and the journal records
all hold the GIL: past a few dozen busy hosts the client is bound to one core however many the
workstation has. Several worker processes, each running its share of the hosts on threads,
use the other cores; the parent still decides everything a run decides (when a host starts,
the batches, max_fail, the deadline, signals), so a run's outcome is the same in one process
or several.

When: ``--workers N`` says it (the run in N processes, its own included; 1: one process, as
before). Without it, a fleet runs in several processes only when the workstation has more than
one core to run on and the hosts busy at once (``forks``, or the largest batch if smaller) are
at least `HOSTS_PER_WORKER` per process. Measured on this repository's 2-core machine (the
file change of kimi-eagle3 over loopback, CPU-seconds of the whole run): a host costs the
client 13-18 ms of CPU (50 hosts: 1.1-1.3 CPU-s, of which ~0.45 s is the fixed start), and a
worker process ~0.5 CPU-s and ~55 MB to start (importing paramiko, fabric, pydantic and the
steps). A second process halves the per-host CPU on the critical path, 6.5-9 ms a host, and
pays for its own start past ~55-75 hosts busy at once — about where the issue's 16-core
measurement found one process bound to its core (100 hosts). Hence 32 busy hosts per process:
two processes from 64 hosts at once, three from 96, up to the cores (at most
`MAX_AUTO_WORKERS`). Under the default ``--forks 10`` a run stays in one process.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
from collections.abc import Sequence
from typing import IO, Any

#: Hosts busy at once for which one more worker process pays (see the module's docstring).
HOSTS_PER_WORKER = 32

#: The most worker processes a run starts on its own (``--workers`` may say more).
MAX_AUTO_WORKERS = 8

_HEADER = struct.Struct(">I")


def cores() -> int:
    """The cores this process may run on (its affinity, as ``taskset`` sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def worker_count(
    requested: int | None, busy_at_once: int, *, cores: int, shardable: bool = True
) -> int:
    """How many processes run the hosts, the run's own included; 1: that one alone, as before.

    ``requested`` is ``--workers`` (None or 0: choose); ``busy_at_once`` the hosts that can
    run at the same time (forks, or fewer hosts); ``shardable`` is False when the hosts are
    opened by something a worker cannot be given (a test's opener): never chosen then.
    """
    if requested:
        return max(1, min(requested, busy_at_once)) if busy_at_once else 1
    if not shardable or cores < 2:
        return 1
    return max(1, min(cores, MAX_AUTO_WORKERS, busy_at_once // HOSTS_PER_WORKER))


def busy_at_once(forks: int, batch_sizes: Sequence[int]) -> int:
    """The most hosts a run has busy at a time: ``forks``, or its largest batch if smaller."""
    return min(forks, max(batch_sizes, default=0))


def pick(loads: Sequence[int | None]) -> int | None:
    """The worker that takes the next host: the least busy one still alive (None: dead),
    the first of them on a tie; None when every worker is dead."""
    best: int | None = None
    for number, load in enumerate(loads):
        if load is not None and (best is None or load < (loads[best] or 0)):
            best = number
    return best


def encode(message: Any) -> bytes:
    """One message as a frame: its length, then its pickle (parent and worker are one program
    of one version, started together; nothing else writes to these pipes)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    body = buffer.getvalue()
    return _HEADER.pack(len(body)) + body


class _Pickler(pickle.Pickler):
    """A playbook's steps are models made at registration (`deploy.config.steps.add_action`),
    found by no module attribute: pickled by their action key, rebuilt from its model."""

    def reducer_override(self, obj: Any) -> Any:
        from deploy.config.steps import StepCommon, action_of

        if isinstance(obj, StepCommon):
            return _blank_step, (action_of(obj),), obj.__getstate__()
        return NotImplemented


def _blank_step(kind: str) -> Any:
    """An empty step model of action ``kind``, for pickle to fill with its state."""
    import deploy.steps  # noqa: F401  (registers every action)
    from deploy.config.steps import STEP_MODELS

    model = STEP_MODELS[kind]
    return model.__new__(model)


def read_message(stream: IO[bytes]) -> Any:
    """The next message on ``stream``; None at its end (a frame cut short is an end too: the
    other side died while writing it)."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(stream, _HEADER.unpack(header)[0])
    if body is None:
        return None
    return pickle.loads(body)


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        try:
            chunk = stream.read(left)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
