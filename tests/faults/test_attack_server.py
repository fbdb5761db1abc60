"""Attacks on the server's identity, by a real unprivileged user (issue 32 points 1 and 2).

**Port squatting.** Root's SGLang serves on ``127.0.0.1:PORT``. The attacker listens on the
same port over IPv6 only (``[::1]:PORT``, ``IPV6_V6ONLY``: both binds succeed) with an
SGLang-looking command line. A deploy that adopts "the" listener may take the attacker's
program for the server: stop root's server (or SIGKILL its children, which hold the port),
restart the attacker's command line, and pass its checks against the attacker. Expected: the
port is held by two process trees of two users, so the host is not attempted (exit 4), each
named, and both processes are left exactly as they were.

Success for the attacker: root's server stopped or replaced, the attacker's process killed or
restarted by deploy, or the run ending 0 (production "served" by their program). Before the
fix: 2 of 2 (root's server gone, one run exit 0).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.sandbox import gpu_host
from tests.faults.attacker import ATTACKER_PYTHON, Attacker, attacker_dir, record_attack
from tests.faults.conftest import FaultHost
from tests.faults.test_attack_files import _inventory
from tests.integration.test_service_runas import as_user

pytestmark = pytest.mark.xdist_group("attacker")

TRIES = 2

#: Listen on [::1]:PORT (IPv6 only) and answer like SGLang's /health; argv after the code
#: makes its command line look like the server's.
SQUAT = r"""
import http.server, json, socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])


class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


Server(("::1", port), Answer).serve_forever()
"""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_ipv6_squatter_beside_roots_server_is_never_adopted(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, tmp_path: Path
) -> None:
    host: FaultHost = make_fault_host(service=True)
    assert host.gpu is not None and host.healthy()
    port = host.gpu.port
    root_pid = gpu_host.listener_pid(port)
    assert root_pid is not None
    # In a session of its own, as a daemon is (and so that a deploy signalling its group
    # never reaches this test's own process group).
    squatter = subprocess.Popen(
        attacker.argv(
            ATTACKER_PYTHON, "-c", SQUAT, "-m", "sglang.launch_server", "--port", str(port)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while len(gpu_host.listener_pids(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert squatter.poll() is None, squatter.communicate()[1]
        tries = successes = 0
        exits: list[int] = []
        named = False
        result = None
        for _ in range(TRIES):
            tries += 1
            result = host.deploy("apply", "kimi-eagle3", "--yes")
            exits.append(result.exit_code)
            named = named or (
                "more than one process tree or user" in result.output
                and attacker.name in result.output
            )
            won = (
                result.exit_code == 0
                or not _pid_alive(root_pid)
                or squatter.poll() is not None
                # (among the listeners, not first of them: which of two process-group
                # leaders comes first goes by pid, and pids wrap at 32768 here)
                or root_pid not in gpu_host.listener_pids(port)
                or host.service_state() != "old"
            )
            successes += won
        left = (
            f"root's server pid {'kept' if _pid_alive(root_pid) else 'gone'}, squatter "
            f"{'alive' if squatter.poll() is None else 'dead'}; exits {exits}"
        )
        record_attack(
            "IPv6-only squatter with an SGLang command line beside root's server on the port",
            tries,
            successes,
            left + ("; refused: two process trees/users named" if named else ""),
        )
        assert successes == 0, (left, result and result.output)
        assert exits == [4] * TRIES and named, result and result.output
        assert host.file_state() == "before", "nothing touched: not even the file"
    finally:
        squatter.send_signal(signal.SIGKILL)
        squatter.communicate()


PLANTED = "import os\nopen({marker!r}, 'w').write(str(os.getuid()))\n"


def test_a_module_planted_in_a_root_servers_cwd_never_runs_as_root(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path
) -> None:
    """Issue 32 point 2: root's server was started by hand with its cwd in a directory the
    attacker owns. Once it serves, the attacker plants ``argparse.py`` there: ``python -m
    sglang.launch_server`` puts the cwd first on ``sys.path``, before the standard library, so
    a restart as root in that directory runs it as root (the ``imports`` check, which looks
    for sglang's own modules, finds them where they belong). Before the fix: the planted code
    ran as uid 0 and the run ended exit 3. Expected: refused before the stop (exit 4), naming the path."""
    host: FaultHost = make_fault_host(service=True)
    gpu = host.gpu
    assert gpu is not None
    old = gpu_host.listener_pid(gpu.port)
    assert old is not None
    os.killpg(os.getpgid(old), signal.SIGKILL)
    while gpu_host.listener_pid(gpu.port) is not None:
        time.sleep(0.05)
    # The SGLang tree where the attacker can read it (the lookup runs as the cwd's owner), as
    # on a shared host; the playbook's variables name that copy.
    gpu, _ = as_user(gpu, attacker, arena)
    host.model_file = gpu.model_file
    python = ATTACKER_PYTHON  # the system's, which every user may run (pyenv's is under /root)
    _inventory(host, **{**{k: str(v) for k, v in gpu.vars.items()}, "sglang_python": python})
    work = attacker_dir(attacker, arena / "ml-work")
    command = gpu.old_server_command().replace(shlex.quote(sys.executable), python, 1)
    command = command.replace(
        f"cd {shlex.quote(str(gpu.ssh.root))} ;", f"cd {shlex.quote(str(work))} ;", 1
    )
    assert str(work) in command
    gpu_host.run_by_hand(gpu, command)
    gpu_host.wait_healthy(gpu.port, 30)
    root_pid = gpu_host.listener_pid(gpu.port)
    marker = arena / "ran-as-root"  # only root may create anything in the arena
    attacker.run(
        "import sys\nopen(sys.argv[1] + '/argparse.py', 'w').write(sys.argv[2])\nprint('{}')\n",
        str(work),
        PLANTED.format(marker=str(marker)),
    )
    result = host.deploy("apply", "kimi-eagle3", "--yes")
    won = marker.exists() or gpu_host.listener_pid(gpu.port) != root_pid
    record_attack(
        "module planted in the cwd (another user's directory) of root's server, then a restart",
        1,
        int(won),
        f"exit {result.exit_code}; root's server {'kept' if not won else 'replaced'}"
        + ("; planted code ran as uid " + marker.read_text() if marker.exists() else ""),
    )
    assert not won, result.output
    assert result.exit_code == 4 and f"{work} is owned by {attacker.name}" in result.output
    assert host.file_state() == "before"
