"""Fixtures of the fault-injection suite: hosts behind a cutting proxy, and the oracle.

Every host here is reached through `CuttingProxy`: the inventory names the proxy's port and a
known_hosts of its own names ``[127.0.0.1]:PROXYPORT`` with the sshd's key, exactly as for a
host that sits behind a NAT or bastion. The oracle never trusts `deploy`: it reads the model
file's sha256 from disk and asks the kernel which command line listens on the service port.

Each check is recorded (`Ledger`); with ``DEPLOY_RELIABILITY_RECORD=FILE`` the records are
appended to FILE as JSON lines, from which ``python -m tools.reliability`` writes
``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.edits.pyinsert import insert_into_class
from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline
from deploy.sandbox.sshd import SshdSandbox, SshHost
from deploy.sandbox.wheels import kimi_k25_source
from tests.faults.attacker import arena, attacker  # noqa: F401 - the attacker suite's fixtures
from tests.faults.helper_hook import FAULT_ENV
from tests.integration.conftest import QUICK_HEALTH, Deploy
from tests.support.proxy import CuttingProxy

REPO = Path(__file__).resolve().parents[2]
MODEL_REL = "sglang/python/sglang/srt/models/kimi_k25.py"
FILES_ONLY = ("--skip-tags", "service")
EAGLE3_FLAG = "--speculative-algorithm"


FULL_ENV = "DEPLOY_FAULTS_FULL"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"slow: only with {FULL_ENV}=1 (the reliability report runs everything)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """CI runs one fault per boundary; `python -m tools.reliability` runs them all."""
    if os.environ.get(FULL_ENV) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"slow fault case: set {FULL_ENV}=1 (the reliability report does)"
    )
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def kimi_patched(original: bytes) -> bytes:
    """What kimi-eagle3's insert makes of ``original``, computed here from the playbook."""
    playbook = yaml.safe_load((REPO / "playbooks/kimi-eagle3.yaml").read_text())
    insert = next(s["python_insert"] for s in playbook["steps"] if "python_insert" in s)
    return insert_into_class(original, "KimiK25ForConditionalGeneration", insert["code"]).content


@dataclass
class Record:
    """One injected fault and what the oracle found after the next command."""

    fault: str
    point: str
    next_command: str
    fault_exit: int
    fault_outcome: str
    next_exit: int
    file_state: str  # "before", "after", "other", "missing"
    service_state: str = "n/a"  # "old", "new", "down", "n/a"
    consistent: bool = False
    truthful: bool = False
    bytes_lost: int = 0
    note: str = ""


@dataclass
class Ledger:
    records: list[Record] = field(default_factory=list)

    def add(self, record: Record) -> None:
        self.records.append(record)
        target = os.environ.get("DEPLOY_RELIABILITY_RECORD")
        if target:
            with open(target, "a", encoding="utf-8") as out:
                out.write(json.dumps({"kind": "fault", **asdict(record)}) + "\n")


LEDGER = Ledger()


def record_check(kind: str, name: str, passed: bool, note: str = "") -> None:
    """Hostile-input and secret checks: one line each in the published report."""
    target = os.environ.get("DEPLOY_RELIABILITY_RECORD")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            line = {"kind": kind, "name": name, "passed": passed, "note": note}
            out.write(json.dumps(line) + "\n")


@dataclass
class FaultHost:
    """One sandbox host behind a proxy, its model file, and a `Deploy` runner through it."""

    ssh: SshHost
    proxy: CuttingProxy
    model_file: Path
    deploy: Deploy
    inventory: Path
    known_hosts: Path
    original: bytes
    patched: bytes
    gpu: GpuHost | None = None
    #: Runs that existed before the faulted command: journal triggers look at newer ones only.
    old_runs: set[str] = field(default_factory=set)
    armed_at: float = 0.0
    #: When a trigger first saw its condition (for triggers that wait a moment after it).
    seen_at: dict[str, float] = field(default_factory=dict)
    #: Where the host's file helper looks for a fault rule (its sessions have `FAULT_ENV`
    #: naming it); absent unless a test arms one (`tests.faults.harness.HelperStop`).
    helper_rule: Path | None = None

    @property
    def state_dir(self) -> Path:
        return self.ssh.state_dir

    def runs(self) -> list[str]:
        runs = self.state_dir / "runs"
        return sorted(p.name for p in runs.iterdir()) if runs.exists() else []

    def journal_lines(self) -> int:
        """Complete lines in the journal of the run started since `old_runs` (0 if none)."""
        new = [run for run in self.runs() if run not in self.old_runs]
        if not new:
            return 0
        journal = self.state_dir / "runs" / new[-1] / "journal.jsonl"
        return journal.read_bytes().count(b"\n") if journal.exists() else 0

    def journal_events(self) -> list[str]:
        journals = sorted((self.state_dir / "runs").glob("*/journal.jsonl"))
        if not journals:
            return []
        return [json.loads(line)["event"] for line in journals[-1].read_text().splitlines()]

    def file_state(self) -> str:
        if not self.model_file.exists():
            return "missing"
        digest = sha(self.model_file.read_bytes())
        if digest == sha(self.original):
            return "before"
        if digest == sha(self.patched):
            return "after"
        return "other"

    def service_state(self) -> str:
        if self.gpu is None:
            return "n/a"
        command = listener_cmdline(self.gpu.port)
        if command is None:
            return "down"
        return "new" if EAGLE3_FLAG in command else "old"

    def stray_files(self) -> list[str]:
        """Temp files deploy left beside the target (a half-written copy is never acceptable)."""
        return sorted(p.name for p in self.model_file.parent.iterdir() if ".deploy-" in p.name)

    def bytes_lost(self) -> int:
        """Bytes of the original no longer on the host: neither in place nor in a saved copy."""
        state = self.file_state()
        if state in ("before", "after"):
            return 0
        copies = list((self.state_dir / "runs").glob(f"*/files/{sha(self.original)}"))
        return 0 if copies else len(self.original)

    def healthy(self, timeout: float = 20.0) -> bool:
        if self.gpu is None:
            return True
        try:
            gpu_host.wait_healthy(self.gpu.port, timeout)
        except TimeoutError:
            return False
        return True


def write_proxied_inventory(
    path: Path, host: SshHost, proxy: CuttingProxy, known_hosts: Path, host_vars: dict[str, Any]
) -> Path:
    """hosts.yaml naming the proxy's port; known_hosts trusting the sshd's key *at that port*."""
    key_type, blob = host.host_key.with_suffix(".pub").read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{proxy.port} {key_type} {blob}\n")
    entry = host.inventory_entry(**host_vars)
    entry.update(port=proxy.port, known_hosts=str(known_hosts))
    document = {
        "hosts": {host.name: entry},
        "groups": {"gpu": [host.name]},
        "vars": {"sglang_python": sys.executable},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
def make_fault_host(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> Iterator[Callable[..., FaultHost]]:
    """``make(service=False, content=None)``: a host with kimi_k25.py 0.5.9 behind a proxy.

    ``service=True`` lays the host out like the SGLang host and starts the old server by hand.
    """
    proxies: list[CuttingProxy] = []

    def make(*, service: bool = False, name: str = "gpu-1", **standin: Any) -> FaultHost:
        workdir = tmp_path / f"workstation-{name}"
        helper_rule = workdir / "helper-fault.json"
        host = sshd_sandbox.start(name, env={FAULT_ENV: str(helper_rule)})
        gpu = None
        if service:
            gpu = gpu_host.prepare(host, "0.5.9", **{**QUICK_HEALTH, **standin})
            model, host_vars = gpu.model_file, dict(gpu.vars)
        else:
            model = host.root / MODEL_REL
            model.parent.mkdir(parents=True, exist_ok=True)
            model.write_bytes(kimi_k25_source("0.5.9"))
            host_vars = {"model_file": str(model)}
        proxy = CuttingProxy(host.port)
        proxies.append(proxy)
        workdir.mkdir()
        (workdir / "playbooks").symlink_to(REPO / "playbooks")
        known = workdir / "known_hosts"
        inventory = write_proxied_inventory(workdir / "hosts.yaml", host, proxy, known, host_vars)
        if gpu is not None:
            gpu_host.start_old_server(gpu)
        original = model.read_bytes()
        return FaultHost(
            host,
            proxy,
            model,
            Deploy(workdir, inventory, module="tests.faults.helper_hook"),
            inventory,
            known,
            original,
            kimi_patched(original),
            gpu,
            helper_rule=helper_rule,
        )

    yield make
    for proxy in proxies:
        proxy.close()


@contextlib.contextmanager
def mounted(target: Path, *options: str, fstype: str = "tmpfs") -> Iterator[Path]:
    """Mount a filesystem over ``target`` holding a copy of its tree; always unmounted after.

    What the test left inside is copied back onto the disk after the unmount, so the next
    command sees the host as the fault left it (journals included), only with space again.
    """
    scratch = Path(tempfile.mkdtemp(prefix="deploy-mount-"))
    try:
        if target.exists():
            shutil.copytree(target, scratch / "before", symlinks=True)
        target.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777
        subprocess.run(["mount", "-t", fstype, *options, fstype, str(target)], check=True)
        try:
            target.chmod(mode)  # a tmpfs root is 1777: keep the directory's own mode (0700)
            if (scratch / "before").exists():
                shutil.copytree(scratch / "before", target, symlinks=True, dirs_exist_ok=True)
            yield target
        finally:
            shutil.copytree(target, scratch / "after", symlinks=True)
            _umount(target)
            shutil.copytree(scratch / "after", target, symlinks=True, dirs_exist_ok=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def read_only(target: Path) -> Iterator[Path]:
    """A read-only bind mount of ``target`` over itself (root ignores mode bits; this it cannot)."""
    subprocess.run(["mount", "--bind", str(target), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)
        yield target
    finally:
        _umount(target)


def _umount(target: Path) -> None:
    for _ in range(50):
        if subprocess.run(["umount", str(target)], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(target)], check=False)


def exit_matches(exit_code: int, state: str, service: str, *, left_unfinished: bool) -> bool:
    """Whether what deploy said (exit code) is true of the host (DESIGN.md's table)."""
    if exit_code == 0:
        return state in ("before", "after") and not left_unfinished
    if exit_code in (1, 2, 4):
        return state == "before" and service in ("old", "n/a") and not left_unfinished
    # 3 = "a human must look": a claim that cannot be false (the figures count how often)
    return exit_code == 3
