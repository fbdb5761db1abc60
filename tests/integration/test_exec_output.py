"""A command's whole output, over real sshd, even what comes after its exit status.

OpenSSH sends a command's exit status as soon as it exits and keeps sending what is left in
its output pipe after that, up to the EOF. `RemoteHost.run` once stopped at the exit status:
`deploy status` then lost the END line of its script under load (CI, test_fleet) and said it
"cannot read" a healthy host. A background process that inherited the output makes the delay
as long as we like, so the order can be shown, not only hoped for.
"""

from __future__ import annotations

import time

from deploy.remote.host import RemoteHost
from deploy.remote.session import Session
from deploy.remote.transport import AFTER_EXIT
from deploy.sandbox.sshd import SshHost
from tests.integration.test_ssh_connect import settings

#: The shell exits at once; a child it left writes to the same stdout and stderr 0.3 s later.
LATE = "(sleep 0.3; echo tail; echo late-err >&2) & echo head"


def test_sshd_sends_the_exit_status_before_the_last_output(ssh_host: SshHost) -> None:
    """The premise, on the real daemon: the status is known while output is still to come."""
    with RemoteHost(settings(ssh_host)) as remote:
        channel = remote.start(LATE)
        assert channel.status_event.wait(5), "no exit status"
        early = b""
        while channel.recv_ready():
            early += channel.recv(1 << 16)
        assert b"tail" not in early, "the late output came before the status this time"
        channel.close()


def test_run_returns_what_comes_after_the_exit_status(ssh_host: SshHost) -> None:
    with RemoteHost(settings(ssh_host)) as remote:
        result = remote.run(LATE, timeout=10)
    assert result.exit_status == 0 and not result.timed_out
    assert result.stdout == "head\ntail\n"
    assert result.stderr == "late-err\n"


def test_a_background_process_holding_the_output_costs_the_window_not_a_hang(
    ssh_host: SshHost,
) -> None:
    with RemoteHost(settings(ssh_host)) as remote:
        began = time.monotonic()
        # A duration no other test sleeps: the pkill below sees every process of this machine
        # (the sandbox host is this machine), and once killed another test's `sleep 30`.
        result = remote.run("sleep 29.17 & echo started", timeout=60)
        took = time.monotonic() - began
        remote.run("pkill -f '^sleep 29.17$' || true")
    assert result.exit_status == 0 and result.stdout == "started\n"
    assert AFTER_EXIT <= took < AFTER_EXIT + 2, f"{took:.2f} s"


def test_a_plain_command_is_not_slowed(ssh_host: SshHost) -> None:
    """The EOF follows the last byte at once: no waiting out the window.

    The fastest of five commands is judged: waiting out the window would put every one of them
    past `AFTER_EXIT`, while a loaded machine only slows some of them down."""
    times = []
    with RemoteHost(settings(ssh_host)) as remote:
        remote.run("true")  # the connection and a first shell: not what is measured
        for _ in range(5):
            began = time.monotonic()
            assert remote.run("echo ok").stdout == "ok\n"
            times.append(time.monotonic() - began)
    assert min(times) < AFTER_EXIT, f"{[round(t, 2) for t in times]} s per command"


def test_the_locks_shell_s_last_answer_after_its_exit_status_is_read(ssh_host: SshHost) -> None:
    """The session reader too: a shell whose answer comes after its exit status is not 'lost'.

    A stand-in for the lock's shell exits at once and leaves a child that writes the answer
    0.3 s later; the request is sent once sshd has sent the exit status."""
    with RemoteHost(settings(ssh_host)) as remote:
        channel = remote.start("(sleep 0.3; printf 'DONE 0 2 0\\nok') & exit 0")
        assert channel.status_event.wait(5), "no exit status"
        assert not channel.recv_ready()
        assert Session(channel).run("true", timeout=10) == (0, b"ok", b"", False)
