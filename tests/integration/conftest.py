"""Fixtures for end-to-end runs of the `deploy` command against real sshd hosts.

A "kimi host" is a sandbox sshd whose root holds SGLang's real ``kimi_k25.py`` where an editable
SGLang checkout keeps it; the inventory points ``model_file`` at it and ``sglang_python`` at this
interpreter. The CLI runs as a real subprocess, as an operator or cron would run it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.remote.connect import ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost
from deploy.sandbox.sshd import SshdSandbox, SshHost
from deploy.sandbox.wheels import kimi_k25_source
from tests.faults.attacker import arena, attacker  # noqa: F401 - the real unprivileged user: test_interpreter_*, test_service_runas

REPO = Path(__file__).resolve().parents[2]
MODEL_REL = "sglang/python/sglang/srt/models/kimi_k25.py"
#: The stand-in's health check as these fixtures start it: 0.1 s, not SGLang's ~1 s (one token
#: generated, seen at a 1 s poll). Only a test about readiness timing needs the real second
#: (test_readiness passes ``health_seconds=1.0``; test_standin_sglang checks the default);
#: every other start, restart and rollback of a server would pay it for nothing.
QUICK_HEALTH: dict[str, object] = {"health_seconds": 0.1}


def open_remote(host: SshHost) -> RemoteHost:
    """deploy's own connection to a sandbox host (strict host keys, TCP_NODELAY), opened."""
    settings = ConnectSettings(
        name=host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        identity_file=str(host.identity_file),
        known_hosts=str(host.known_hosts),
    )
    return RemoteHost(settings).open()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class KimiHost:
    host: SshHost
    model_file: Path

    @property
    def runs_dir(self) -> Path:
        return self.host.state_dir / "runs"

    def runs(self) -> list[str]:
        return sorted(p.name for p in self.runs_dir.iterdir()) if self.runs_dir.exists() else []


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Deploy:
    """Runs ``deploy`` as a subprocess in a working directory holding hosts.yaml."""

    def __init__(self, workdir: Path, inventory: Path, module: str = "deploy.cli") -> None:
        self.workdir = workdir
        self.inventory = inventory
        #: What ``python -m`` runs: the CLI, or a test's wrapper of it (the fault suite's
        #: helper hook: `tests.faults.helper_hook`), found from the repository's root.
        self.module = module

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "DEPLOY_INVENTORY": str(self.inventory)}
        if self.module != "deploy.cli":
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        return env

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", self.module, *args],
            cwd=self.workdir,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self._env(),
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", self.module, *args],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(),
        )


@pytest.fixture
def make_kimi_hosts(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> Callable[..., tuple[list[KimiHost], Deploy]]:
    """Start N sandbox hosts with a given SGLang version's kimi_k25.py, and a `Deploy` runner."""

    def make(versions: list[str | None], **host_vars: object) -> tuple[list[KimiHost], Deploy]:
        hosts = sshd_sandbox.start_many([f"gpu-{i + 1}" for i in range(len(versions))])
        kimi_hosts = []
        per_host: dict[str, dict[str, object]] = {}
        for host, version in zip(hosts, versions, strict=True):
            model = host.root / MODEL_REL
            model.parent.mkdir(parents=True, exist_ok=True)
            if version is not None:
                model.write_bytes(kimi_k25_source(version))
            kimi_hosts.append(KimiHost(host, model))
            per_host[host.name] = {"model_file": str(model), **host_vars}
        workdir = tmp_path / "workstation"
        workdir.mkdir(exist_ok=True)
        (workdir / "playbooks").symlink_to(REPO / "playbooks")
        inventory = sshd_sandbox.write_inventory(
            workdir / "hosts.yaml",
            hosts,
            groups={"gpu": [h.name for h in hosts]},
            vars={"sglang_python": sys.executable},
            host_vars=per_host,
        )
        return kimi_hosts, Deploy(workdir, inventory)

    return make


@pytest.fixture
def kimi_059(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> tuple[KimiHost, Deploy]:
    hosts, deploy = make_kimi_hosts(["0.5.9"])
    return hosts[0], deploy


@pytest.fixture
def make_gpu_hosts(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> Callable[..., tuple[list[GpuHost], Deploy]]:
    """Sandbox hosts laid out like the SGLang host, with the stand-in server (not started)."""

    def make(
        versions: list[str | None], *, names: list[str] | None = None, **standin: object
    ) -> tuple[list[GpuHost], Deploy]:
        names = names or [f"gpu-{i + 1}" for i in range(len(versions))]
        hosts = sshd_sandbox.start_many(names)
        settings = {**QUICK_HEALTH, **standin}
        gpus = [gpu_host.prepare(h, v, **settings) for h, v in zip(hosts, versions, strict=True)]
        workdir = tmp_path / "workstation"
        workdir.mkdir(exist_ok=True)
        if not (workdir / "playbooks").exists():
            (workdir / "playbooks").symlink_to(REPO / "playbooks")
        inventory = sshd_sandbox.write_inventory(
            workdir / "hosts.yaml",
            hosts,
            groups={"gpu": [h.name for h in hosts]},
            host_vars={g.ssh.name: g.vars for g in gpus},
        )
        return gpus, Deploy(workdir, inventory)

    return make


@pytest.fixture
def serving_059(
    make_gpu_hosts: Callable[..., tuple[list[GpuHost], Deploy]],
) -> tuple[GpuHost, Deploy]:
    """One host on SGLang 0.5.9, its server started by hand (no EAGLE-3), healthy."""
    gpus, deploy = make_gpu_hosts(["0.5.9"])
    gpu_host.start_old_server(gpus[0])
    return gpus[0], deploy
