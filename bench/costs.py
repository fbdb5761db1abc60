"""The unit prices behind the round-trip budget: one exec, one SFTP request, one ``.bashrc``.

Measured on one sandbox host over one open paramiko connection, so that connection set-up is
not in the numbers: an exec of ``true`` (channel open, the user's login shell with its
``.bashrc``, exit status), an SFTP ``lstat`` (one request, answered in the running SFTP
server), and — on the workstation, no SSH — ``bash -c true`` as sshd starts it (bash reads
``~/.bashrc`` when ``SSH_CLIENT`` is set) versus ``bash --norc``. The difference of the last
two is what each exec pays for the host's shell start-up files alone.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable

import paramiko

from deploy.sandbox.sshd import SshHost

REPEAT = 15


def _medians_ms(actions: dict[str, Callable[[], object]], repeat: int = REPEAT) -> dict[str, float]:
    """Median milliseconds of each action, sampled round-robin so that a busy moment of the
    machine (other test suites share these cores) hits every action alike."""
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            began = time.perf_counter()
            action()
            samples[name].append(time.perf_counter() - began)
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def _bash(*args: str, env: dict[str, str]) -> None:
    subprocess.run(["bash", *args, "-c", "true"], env=env, check=False, timeout=30)


def unit_prices(host: SshHost, path: str) -> dict[str, float]:
    """Median milliseconds of each kind of operation (see the module docstring).

    Raises:
        paramiko.SSHException, OSError: the host could not be reached.
    """
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(str(host.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=str(host.identity_file),
            look_for_keys=False,
            allow_agent=False,
            timeout=30,
        )
        sftp = client.open_sftp()

        def exec_true() -> None:
            _, stdout, _ = client.exec_command("true", timeout=30)
            stdout.channel.recv_exit_status()

        # sshd's environment for a session: a minimal PATH, the user's HOME, SSH_CLIENT set.
        home = os.path.expanduser("~" + host.user)
        ssh_like = {
            "HOME": home,
            "USER": host.user,
            "LOGNAME": host.user,
            "SHELL": "/bin/bash",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SSH_CLIENT": "127.0.0.1 50000 22",
            "SHLVL": "0",
        }
        prices = _medians_ms(
            {
                "exec `true` (open connection)": exec_true,
                "SFTP lstat (open connection)": lambda: sftp.lstat(path),
                "local `bash -c true` as sshd runs it (reads .bashrc)": lambda: _bash(env=ssh_like),
                "local `bash --norc -c true`": lambda: _bash("--norc", env=ssh_like),
            }
        )
        sftp.close()
    finally:
        client.close()
    return prices
