"""N real sshd hosts on loopback, each holding SGLang 0.5.9's real ``kimi_k25.py``.

The hosts come from `deploy.sandbox.sshd.SshdSandbox`, the same daemons the integration tests
use, so every tool talks to a real OpenSSH server that runs root's real login shell (its
``.bashrc`` included: that is a cost a tool pays per exec, and the benchmark must see it).

A `Fleet` also owns a throwaway "workstation": a HOME without ``~/.ssh`` or an agent, where each
tool's inventory and task files are written, so that nothing a developer has configured can
speed up or slow down one tool and not another. `Fleet.reset` puts every host back as it was
(the original bytes, no backups, no deploy state); it runs between timed runs, never inside one.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.workload import MODEL_REL
from deploy.sandbox.sshd import READY_TIMEOUT, SshdSandbox, SshHost

#: Seconds each daemon of a large fleet is given to come up (`start_fleet`).
READY_SECONDS_PER_HOST = 0.3
#: Variables that would let a tool reach an agent or the developer's own configuration.
_HIDDEN_ENV = ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "DEPLOY_INVENTORY", "ANSIBLE_CONFIG")


@dataclass
class Fleet:
    """Running hosts plus the workstation directory every tool is started from."""

    sandbox: SshdSandbox
    hosts: list[SshHost]
    workdir: Path
    original: bytes
    #: The interpreter on the hosts that compiles the file (``sglang_python``): the real
    #: binary, not a pyenv shim, so no tool pays for a shim on every compile.
    python: str

    @property
    def home(self) -> Path:
        return self.workdir / "home"

    def model_file(self, host: SshHost) -> Path:
        return host.root / MODEL_REL

    def env(self, **extra: str) -> dict[str, str]:
        """The environment every tool runs in: a clean HOME, no agent, no colours."""
        env = {k: v for k, v in os.environ.items() if k not in _HIDDEN_ENV}
        env.update(
            HOME=str(self.home),
            XDG_STATE_HOME=str(self.home / ".local/state"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            NO_COLOR="1",
            TERM="dumb",
        )
        env.update(extra)
        return env

    def reset(self) -> None:
        """Every host back to the pristine 0.5.9 file: no backups beside it, no deploy state,
        no bytecode; the workstation's run history emptied. Not timed."""
        for host in self.hosts:
            model = self.model_file(host)
            for stale in model.parent.iterdir():
                if stale.name.startswith((model.name + ".", "." + model.name + ".")):
                    stale.unlink()
            shutil.rmtree(model.parent / "__pycache__", ignore_errors=True)
            model.write_bytes(self.original)
            model.chmod(0o644)
            shutil.rmtree(host.state_dir, ignore_errors=True)
        shutil.rmtree(self.home / ".local/state", ignore_errors=True)

    def contents(self) -> dict[str, bytes]:
        return {h.name: self.model_file(h).read_bytes() for h in self.hosts}


def start_fleet(
    sandbox: SshdSandbox, count: int, original: bytes, repo: Path, workdir: Path
) -> Fleet:
    """Start ``count`` hosts in ``sandbox`` and write deploy's inventory for them.

    The other tools' files are written by their `bench.tools` adapters, from the same hosts.

    The daemons are given ``READY_SECONDS_PER_HOST`` each to answer, at least the sandbox's
    own 10 s: 200 of them forking their readiness probes at once on 2 busy cores take longer.

    Raises:
        SandboxError: a daemon did not come up.
    """
    timeout = max(READY_TIMEOUT, READY_SECONDS_PER_HOST * count)
    hosts = sandbox.start_many([f"gpu-{i + 1:02d}" for i in range(count)], timeout=timeout)
    workdir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(sandbox, hosts, workdir, original, os.path.realpath(sys.executable))
    fleet.home.mkdir(exist_ok=True)
    for host in hosts:
        fleet.model_file(host).parent.mkdir(parents=True, exist_ok=True)
    fleet.reset()
    _write_workstation(fleet, repo)
    return fleet


def through(fleet: Fleet, ports: dict[str, int], workdir: Path, repo: Path) -> Fleet:
    """The same hosts reached through other loopback ports (`bench.delay`'s proxies).

    Each host keeps its files and state (``root``, ``state_dir``); only the port a client
    dials changes. A fresh workstation under ``workdir`` holds deploy's inventory for those
    ports and a known_hosts naming ``[127.0.0.1]:PROXYPORT`` with each host's real key, so
    every tool still checks host keys strictly.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    known_hosts = workdir / "known_hosts"
    hosts = [replace(h, port=ports[h.name], known_hosts=known_hosts) for h in fleet.hosts]
    known_hosts.write_text("".join(h.host_key_line() + "\n" for h in hosts))
    view = Fleet(fleet.sandbox, hosts, workdir, fleet.original, fleet.python)
    view.home.mkdir(exist_ok=True)
    _write_workstation(view, repo)
    return view


def _write_workstation(fleet: Fleet, repo: Path) -> None:
    """deploy's inventory (``hosts.yaml``) and ``playbooks/`` in the fleet's workstation."""
    workdir = fleet.workdir
    playbooks = workdir / "playbooks"
    if not playbooks.exists():
        playbooks.symlink_to(repo / "playbooks")
    fleet.sandbox.write_inventory(
        workdir / "hosts.yaml",
        fleet.hosts,
        groups={"gpu": [h.name for h in fleet.hosts]},
        vars={"sglang_python": fleet.python},
        host_vars={h.name: {"model_file": str(fleet.model_file(h))} for h in fleet.hosts},
    )
