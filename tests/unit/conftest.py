"""Shared unit-test fixtures: SGLang's real kimi_k25.py, and this machine as a host.

``private`` is a 0700 directory (state_dir's trust check wants no parent writable by group or
others, so never /tmp itself); ``local_host`` is a `LocalHost` at home there, and ``locked``
the same host holding the real lock (so its session loop and file helper are running).
``rig`` is a `LocalRig` for runs of the engine, and ``kimi`` puts 0.5.9's kimi_k25.py on it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from deploy.remote.lock import acquire
from deploy.sandbox.wheels import kimi_k25_source
from tests.unit.local_host import LocalHost
from tests.unit.local_rig import LocalRig


@pytest.fixture(scope="session")
def kimi_source() -> Callable[[str], bytes]:
    """``kimi_source("0.5.9")``: the real bytes of SGLang's kimi_k25.py (wheel cached once)."""
    return cache(kimi_k25_source)


@pytest.fixture
def private(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    root.mkdir(mode=0o700)
    return root


@pytest.fixture
def local_host(private: Path) -> Iterator[LocalHost]:
    with LocalHost("local", home=str(private)) as host:
        yield host


@pytest.fixture
def locked(local_host: LocalHost, private: Path) -> Iterator[LocalHost]:
    lock = acquire(local_host, str(private / "state"), {"run_id": "t"})
    try:
        yield local_host
    finally:
        lock.release()


@pytest.fixture
def rig(tmp_path: Path) -> LocalRig:
    return LocalRig(tmp_path / "host")


@pytest.fixture
def kimi(rig: LocalRig, kimi_source: Callable[[str], bytes]) -> Path:
    """SGLang 0.5.9's real kimi_k25.py on the local host, mode 0640, named by the inventory."""
    model = rig.files / "kimi_k25.py"
    model.write_bytes(kimi_source("0.5.9"))
    os.chmod(model, 0o640)
    rig.write_inventory(model_file=str(model), sglang_python=sys.executable)
    return model
