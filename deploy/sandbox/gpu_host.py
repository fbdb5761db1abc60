"""A sandbox SSH host laid out like the 8-GPU SGLang host, with the stand-in server.

On the real host, SGLang is an editable checkout: ``/root/sglang/python/sglang/...`` with the
model file at ``srt/models/kimi_k25.py``, and the server runs as
``python -m sglang.launch_server ...``. Here the same tree lives under the sandbox host's root:
SGLang's real ``kimi_k25.py`` (from the wheel) beside the stand-in's ``launch_server.py``, and a
fake ``nvidia-smi`` in ``<root>/bin``. The playbook's real command line, with
``PYTHONPATH=<root>/sglang/python``, starts the stand-in.

Used by the integration tests, ``deploy demo`` and the benchmark.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.sandbox.ports import free_port
from deploy.sandbox.sshd import SshHost
from deploy.sandbox.wheels import kimi_k25_source, server_flags

STANDIN = Path(__file__).resolve().parent / "fake_sglang"
MODEL_REL = "sglang/python/sglang/srt/models/kimi_k25.py"

#: A fast stand-in: short load and warm-up; EAGLE-3 faster than plain decoding.
#: Speeds are low enough that a measurement is dominated by generation, not by SSH overhead,
#: even on a loaded 2-core CI machine (64 tokens: 0.4 s plain, 0.2 s with EAGLE-3).
FAST = {
    "load_seconds": 0.5,
    "warmup_seconds": 0.3,
    "tokens_per_s": 160.0,
    "eagle3_tokens_per_s": 320.0,
}


@dataclass
class GpuHost:
    """Paths and variables of one prepared host."""

    ssh: SshHost
    port: int
    model_file: Path
    python_path: Path
    standin_config: Path

    @property
    def vars(self) -> dict[str, Any]:
        """Host variables that point the kimi-eagle3 playbook at this sandbox layout."""
        return {
            "model_file": str(self.model_file),
            "sglang_python": sys.executable,
            "sglang_pythonpath": str(self.python_path),
            "sglang_cwd": str(self.ssh.root),
            "sglang_port": self.port,
            "nvidia_smi": str(self.ssh.root / "bin" / "nvidia-smi"),
            "model_path": "nvidia/Kimi-K2.5-NVFP4",
            "draft_model_path": "lightseek/kimi-k2.5-eagle3-standin",
            "tp": 2,
            "sglang_ready_timeout": 60,
        }

    def configure(self, **settings: Any) -> None:
        """Change the stand-in's behaviour (load time, speeds, orphaning) for the next start."""
        current = (
            json.loads(self.standin_config.read_text()) if self.standin_config.exists() else {}
        )
        current.update(settings)
        self.standin_config.write_text(json.dumps(current))

    def old_server_command(
        self,
        *,
        eagle3: bool = False,
        log: Path | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        python_path: Path | None = None,
    ) -> str:
        """The command an operator typed by hand to start the server before deploy existed
        (``extra_args`` after the usual flags, ``env`` exported before it, ``python_path``
        instead of the checkout: where sglang is imported from)."""
        args = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            "nvidia/Kimi-K2.5-NVFP4",
            "--tp",
            "2",
            "--trust-remote-code",
            "--port",
            str(self.port),
        ]
        if eagle3:
            args += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft"]
        args += extra_args or []
        logfile = log or (self.ssh.root / "manual-sglang.log")
        assignments = {"PYTHONPATH": str(python_path or self.python_path), **(env or {})}
        exported = " ".join(f"{k}={shlex.quote(v)}" for k, v in assignments.items())
        return (
            f"cd {shlex.quote(str(self.ssh.root))} ; {exported} "
            f"setsid nohup {shlex.join(args)} > {shlex.quote(str(logfile))} 2>&1 < /dev/null &"
        )


@functools.cache
def _server_flags_json() -> str:
    return json.dumps(server_flags())


def write_server_flags(package: Path) -> None:
    """Give the stand-in in ``package`` SGLang 0.5.9's full option list (from the wheel), so it
    accepts and abbreviates flags exactly as 0.5.9 does (see its ``standin_args``)."""
    (package / "server_flags.json").write_text(_server_flags_json())


def prepare(host: SshHost, version: str | None = "0.5.9", **standin: Any) -> GpuHost:
    """Lay out SGLang's tree with the real model file and the stand-in on ``host``."""
    package = host.root / "sglang" / "python" / "sglang"
    (package / "srt" / "models").mkdir(parents=True, exist_ok=True)
    for item in (STANDIN / "sglang").iterdir():
        if item.suffix == ".py":
            shutil.copy2(item, package / item.name)
    (package / "srt").mkdir(exist_ok=True)  # server_args: the parser a command-line check uses
    shutil.copy2(STANDIN / "sglang" / "srt" / "server_args.py", package / "srt" / "server_args.py")
    write_server_flags(package)
    model = host.root / MODEL_REL
    if version is not None:
        model.write_bytes(kimi_k25_source(version))
    bin_dir = host.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    shutil.copy2(STANDIN / "bin" / "nvidia-smi", bin_dir / "nvidia-smi")
    gpu = GpuHost(
        host, free_port(), model, host.root / "sglang" / "python", package / "standin.json"
    )
    gpu.configure(**{**FAST, **standin})
    return gpu


def start_old_server(
    gpu: GpuHost,
    *,
    eagle3: bool = False,
    timeout: float = 30.0,
    address: str = "127.0.0.1",
    **command: Any,
) -> None:
    """Start the server "by hand" over SSH (as operators do) and wait until it is healthy at
    ``address`` (``command``: `GpuHost.old_server_command`'s other keywords)."""
    run_by_hand(gpu, gpu.old_server_command(eagle3=eagle3, **command))
    wait_healthy(gpu.port, timeout, address=address)


def run_by_hand(gpu: GpuHost, command: str) -> None:
    """Run ``command`` on the host over a plain SSH login (its own connection, host key
    checked), as an operator's shell would; returns when the command's shell has exited."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(str(gpu.ssh.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        gpu.ssh.address,
        gpu.ssh.port,
        username=gpu.ssh.user,
        key_filename=str(gpu.ssh.identity_file),
        allow_agent=False,
        look_for_keys=False,
        timeout=10,
    )
    try:
        _, stdout, _ = client.exec_command(command)
        stdout.channel.recv_exit_status()
    finally:
        client.close()


def wait_healthy(port: int, timeout: float = 30.0, *, address: str = "127.0.0.1") -> None:
    """Poll http://ADDRESS:PORT/health_generate until 200 (raises TimeoutError); ``address``
    is always a loopback one (127.0.0.0/8)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(
                f"http://{address}:{port}/health_generate", timeout=2
            ) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"stand-in on port {port} not healthy after {timeout:g} s")


def hold_gpu(gpu: GpuHost, pid: int, index: int, mib: int = 30000) -> None:
    """Show process ``pid`` on the fake GPU ``index`` with ``mib`` of memory, as nvidia-smi
    shows another user's job: an entry in the stand-in's GPU registry, with its start time so
    that a reused pid is not taken for it."""
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    registry = gpu.ssh.root / "sglang" / ".standin-gpu"
    registry.mkdir(exist_ok=True)
    entry = {"pid": pid, "name": "python3", "used_memory_mib": mib, "gpu_index": index}
    (registry / str(pid)).write_text(json.dumps({**entry, "start_time": start}))


def listener_pid(port: int) -> int | None:
    """The pid of a process listening on ``port`` on this machine (the tests' oracle)."""
    pids = listener_pids(port)
    return pids[0] if pids else None


def listener_pids(port: int) -> list[int]:
    """Every pid holding a socket that listens on ``port``, the process-group leader first."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return []
    candidates = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(str(fd.readlink()) in inodes for fd in (proc / "fd").iterdir()):
                candidates.append(int(proc.name))
        except OSError:
            continue
    # Several processes may share the socket (SGLang's children inherit it): prefer the leader.
    candidates.sort(key=lambda pid: (_pgid(pid) != pid, pid))
    return candidates


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def listener_cmdline(port: int) -> list[str] | None:
    """The command line of the process listening on ``port`` (None when nothing listens)."""
    pid = listener_pid(port)
    if pid is None:
        return None
    try:
        return (
            (Path("/proc") / str(pid) / "cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        )
    except OSError:
        return None
