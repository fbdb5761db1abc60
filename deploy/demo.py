"""``deploy demo``: the whole story on this machine, against a throwaway host, in one command.

1. Start a host: a real OpenSSH sshd on a free loopback port, with generated keys and its own
   known_hosts, holding SGLang 0.5.9's real ``kimi_k25.py`` (from the wheel, cached) laid out as
   on the GPU host, and the stand-in SGLang server started "by hand", as operators do today.
2. ``deploy apply kimi-eagle3``: the plan and diff, then the run with progress, restart,
   health, smoke test and the throughput gate with its before and after figures.
3. The classic mistake, appending the methods after ``EntryClass``: verification fails and the
   file is put back byte for byte; the server never stopped serving.
4. ``deploy history``, then ``deploy rollback`` of the good run: the original file and the old
   server, healthy again.
5. Clean up everything it started, on Ctrl-C too (``--keep`` leaves it running and prints the
   inventory to use with ``-i``).

Every command shown is a real ``deploy`` process run against the sandbox, exactly as a user
would type it.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import click

from deploy.sandbox import gpu_host
from deploy.sandbox.sshd import SshdSandbox
from deploy.sandbox.sshd_setup import SandboxError
from deploy.sandbox.wheels import kimi_k25_source

#: The playbooks shipped in the package (the repository's ``playbooks/`` links to them).
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


def _say(out: TextIO, text: str, *, bold: bool = False) -> None:
    colour = out.isatty() and not os.environ.get("NO_COLOR")
    click.echo(click.style(text, bold=True, fg="cyan") if colour and bold else text, file=out)


class Demo:
    """The sandbox and the commands run against it."""

    def __init__(self, base: Path, out: TextIO) -> None:
        self.base = base
        self.out = out
        self.workdir = base / "workstation"
        self.sandbox = SshdSandbox(base / "hosts")
        self.env = {
            **os.environ,
            "DEPLOY_INVENTORY": str(self.workdir / "hosts.yaml"),
            "XDG_STATE_HOME": str(base / "state"),
        }

    def start(self) -> gpu_host.GpuHost:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "playbooks").symlink_to(PLAYBOOKS, target_is_directory=True)
        _say(
            self.out,
            "1. A throwaway GPU host: sshd on loopback, SGLang 0.5.9's real kimi_k25.py, stand-in server",
            bold=True,
        )
        host = self.sandbox.start("gpu-1")
        gpu = gpu_host.prepare(
            host,
            "0.5.9",
            load_seconds=3.0,
            warmup_seconds=1.0,
            tokens_per_s=54.1,
            eagle3_tokens_per_s=96.1,
        )
        self.sandbox.write_inventory(
            self.workdir / "hosts.yaml",
            [host],
            groups={"gpu": ["gpu-1"]},
            host_vars={"gpu-1": {**gpu.vars, "sglang_ready_timeout": 120}},
        )
        _say(
            self.out,
            f"   host gpu-1 = ssh {host.user}@127.0.0.1 -p {host.port}; model file {gpu.model_file}",
        )
        _say(
            self.out,
            f"   starting SGLang by hand (nohup python -m sglang.launch_server ... --port {gpu.port}) ...",
        )
        gpu_host.start_old_server(gpu, timeout=60)
        _say(self.out, "   old server healthy (no EAGLE-3)\n")
        return gpu

    def deploy(self, *args: str) -> int:
        """Run a real ``deploy`` process against the sandbox, showing the command line."""
        _say(self.out, f"$ deploy {shlex.join(args)}")
        proc = subprocess.run(
            [sys.executable, "-m", "deploy.cli", *args],
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            check=False,
        )
        _say(self.out, f"(exit {proc.returncode})\n")
        return proc.returncode

    def close(self) -> None:
        self.sandbox.close()


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends the demo like Ctrl-C: through the clean-up below."""
    raise KeyboardInterrupt


def run(*, keep: bool = False, out: TextIO | None = None) -> int:
    """Run the demo; 0 when every act ended as it should."""
    stream = out or sys.stdout
    base = Path(tempfile.mkdtemp(prefix="deploy-demo-"))
    demo = Demo(base, stream)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    failures = []
    try:
        gpu = demo.start()
        _say(stream, "2. Patch SGLang for EAGLE-3: the plan first, then the run", bold=True)
        if demo.deploy("apply", "kimi-eagle3", "--check") != 0:
            failures.append("plan")
        if demo.deploy("apply", "kimi-eagle3", "--yes") != 0:
            failures.append("apply")
        command = gpu_host.listener_cmdline(gpu.port) or []
        _say(stream, "   now serving: " + " ".join(command[1:])[:160] + "\n")

        _say(
            stream,
            "3. The classic mistake: `cat >> kimi_k25.py` puts the methods after EntryClass",
            bold=True,
        )
        before = gpu.model_file.read_bytes()
        if demo.deploy("apply", "kimi-eagle3-naive-append", "--yes") != 1:
            failures.append("the naive append was not caught")
        same = gpu.model_file.read_bytes() == before
        if not same:
            failures.append("the file was not restored")
        _say(
            stream,
            f"   file byte-identical to before the mistake: {same}; server untouched: "
            f"{(gpu_host.listener_cmdline(gpu.port) or []) == command}\n",
        )

        _say(stream, "4. What ran, and putting the good run back", bold=True)
        demo.deploy("history")
        if demo.deploy("rollback", "--yes") != 0:
            failures.append("rollback")
        if gpu.model_file.read_bytes() != kimi_k25_source("0.5.9"):
            failures.append("rollback did not restore 0.5.9's file")
        _say(
            stream,
            "   serving again: " + " ".join((gpu_host.listener_cmdline(gpu.port) or [])[1:])[:160],
        )
        if keep:
            _say(
                stream,
                f"\n--keep: the host stays up. Try: deploy -h; deploy apply kimi-eagle3 --check -i {demo.workdir / 'hosts.yaml'}",
            )
            _say(
                stream,
                f"State and history: XDG_STATE_HOME={base / 'state'}. Stop it with: kill {os.getpid()} (or Ctrl-C)",
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        _say(stream, "\ninterrupted: cleaning up")
        failures.append("interrupted")
    except (SandboxError, RuntimeError, TimeoutError) as exc:
        _say(stream, f"demo could not run: {exc}")
        failures.append(str(exc))
    finally:
        demo.close()
        signal.signal(signal.SIGTERM, previous)
        _say(
            stream,
            f"\n5. Cleaned up: every daemon and server the demo started is stopped ({base} kept for inspection).",
        )
    if failures:
        _say(stream, "demo: something did not go as shown: " + ", ".join(failures))
        return 1
    _say(stream, "demo: every act ended as expected.")
    return 0
