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
5. Clean up everything it started, on Ctrl-C too. ``--keep`` leaves the host running and
   returns the prompt: the demo goes on in the background (its sshd daemons die with it),
   prints an ``export`` line that points ``deploy`` at the sandbox, and ``deploy demo --stop``
   ends it and cleans up.

Every command shown is a real ``deploy`` process run against the sandbox, exactly as a user
would type it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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

    def applied(self, playbook: str) -> str | None:
        """The id of the latest real ``apply`` of ``playbook`` in this demo's history."""
        from deploy.engine.results import RunResult

        latest: tuple[str, str] | None = None
        for path in (self.base / "state" / "deploy" / "runs").glob("*.json"):
            try:
                run = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError, KeyError):
                continue
            if run.command == "apply" and run.playbook == playbook and not run.check_mode:
                latest = max(latest or (run.started, run.run_id), (run.started, run.run_id))
        return latest[1] if latest else None

    def close(self) -> None:
        self.sandbox.close()


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends the demo like Ctrl-C: through the clean-up below."""
    raise KeyboardInterrupt


def kept_file() -> Path:
    """Where a ``--keep`` demo left its pid and directory, for ``deploy demo --stop``."""
    from deploy.engine.history import state_home

    return state_home() / "demo.json"


def _record_kept(base: Path) -> None:
    """Note the kept demo where ``--stop`` looks: the user's state home, and the demo's own
    (which the printed ``export XDG_STATE_HOME=…`` makes the state home)."""
    paths = [kept_file(), base / "state" / "deploy" / "demo.json"]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), "base": str(base)}))


def run_kept(out: TextIO | None = None) -> int:
    """``deploy demo --keep``: the demo in a child process that stays behind with the host.

    The child runs every act in the foreground (Ctrl-C still reaches it, and its output is
    the terminal's); once the host is ready for the user it sends its verdict through a pipe,
    moves its output to ``demo.log`` in the demo's directory and leaves the terminal's
    session, and this process returns the prompt with that verdict as its exit code.
    """
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the demo, then the host kept up until `deploy demo --stop`
        os.close(reader)

        def detached(code: int, base: Path) -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            log = os.open(base / "demo.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            for fd in (1, 2):
                os.dup2(log, fd)
            os.close(log)
            os.setsid()  # the terminal's Ctrl-C and hang-up are no longer ours
            os.write(writer, str(code).encode())
            os.close(writer)

        code = 1
        try:
            code = run(keep=True, out=out, detached=detached)
        finally:
            with contextlib.suppress(OSError):
                kept_file().unlink()
            os._exit(code)
    os.close(writer)
    verdict = b""
    while True:
        try:
            verdict = os.read(reader, 16)  # empty: the child ended (failed, or Ctrl-C)
            break
        except KeyboardInterrupt:
            continue  # the child got it too and cleans up; its exit ends the read
    if not verdict:
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) or 1
    return int(verdict)


def stop_kept(out: TextIO | None = None) -> int:
    """``deploy demo --stop``: end a ``--keep`` demo (SIGTERM: it cleans up), wait for it."""
    stream = out or sys.stdout
    path = kept_file()
    try:
        kept = json.loads(path.read_text())
        pid = int(kept["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        _say(stream, "no demo is running (deploy demo --keep starts one)")
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        _say(stream, f"the demo (pid {pid}) had already ended")
        return 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _say(stream, f"stopped the demo (pid {pid}); its host and server are gone")
            path.unlink(missing_ok=True)
            Path(kept["base"], "state", "deploy", "demo.json").unlink(missing_ok=True)
            return 0
        time.sleep(0.2)
    _say(stream, f"the demo (pid {pid}) did not stop within 60 s; see {kept.get('base')}/demo.log")
    return 1


def run(
    *,
    keep: bool = False,
    out: TextIO | None = None,
    detached: Callable[[int, Path], None] | None = None,
) -> int:
    """Run the demo; 0 when every act ended as it should.

    With ``keep`` it then blocks, keeping the host up, until SIGTERM or Ctrl-C; ``detached``
    (from `run_kept`) is told the verdict first, so the user gets the prompt back.
    """
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
        # In full: the flags EAGLE-3 added are the point, and a cut mid-word reads as a bug.
        _say(stream, "   now serving: " + shlex.join(command[1:]) + "\n")

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
        # The latest run (the mistake) already put itself back, so a bare `deploy rollback`
        # would say "nothing to do" and never reach an older run: name the good one.
        good = demo.applied("kimi-eagle3")
        if good is None or demo.deploy("rollback", good, "--yes") != 0:
            failures.append("rollback")
        if gpu.model_file.read_bytes() != kimi_k25_source("0.5.9"):
            failures.append("rollback did not restore 0.5.9's file")
        _say(
            stream,
            "   serving again: " + shlex.join((gpu_host.listener_cmdline(gpu.port) or [])[1:]),
        )
        if keep:
            exports = {
                "DEPLOY_INVENTORY": str(demo.workdir / "hosts.yaml"),
                "XDG_STATE_HOME": str(base / "state"),
            }
            _say(
                stream,
                "\n--keep: the host stays up in the background. To use it from this shell:\n"
                "  export "
                + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
                + f"\n  cd {shlex.quote(str(demo.workdir))}"
                + "; deploy apply kimi-eagle3 --check; deploy history"
                + "\nStop it and clean up with: deploy demo --stop",
            )
            _record_kept(base)
            if detached is not None:
                detached(1 if failures else 0, base)
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
