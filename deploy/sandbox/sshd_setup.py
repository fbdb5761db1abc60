"""What one sandbox daemon needs before it starts: the binary, keys, a config.

Kept apart from running the daemons (`deploy.sandbox.sshd`): everything here is done once
per daemon and fails with a `SandboxError` that says what to install or fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


class SandboxError(RuntimeError):
    """A daemon could not be started or stopped; the message carries its log tail."""


# Absolute paths throughout (sshd re-execs itself and resolves nothing relative).
CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey "{workdir}/ssh_host_ed25519_key"
AuthorizedKeysFile "{workdir}/authorized_keys"
PidFile "{workdir}/sshd.pid"
# keys live under /tmp, whose ownership and modes sshd would otherwise reject
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
# internal-sftp serves SFTP in-process; an sftp-server program is started through the
# user's login shell (.bashrc included), as on a stock Debian host
Subsystem sftp {sftp}
MaxSessions 64
MaxStartups 200
PrintMotd no
PrintLastLog no
LogLevel INFO
# sshd honours only the first SetEnv line: every variable goes on this one
SetEnv {setenv}
"""


def find_sshd() -> str:
    """The absolute path of ``sshd`` (it refuses to re-exec itself from a relative one).

    Raises:
        SandboxError: not installed; the message says how to install it.
    """
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])
    found = shutil.which("sshd", path=search)
    if found is None:
        raise SandboxError("sshd not found: install it with `apt-get install -y openssh-server`")
    return os.path.abspath(found)


def keygen(paths: list[Path], comment: str) -> None:
    """Make unencrypted ed25519 keys, all ``ssh-keygen`` processes at once."""
    procs = []
    for path in paths:
        for stale in (path, path.with_name(path.name + ".pub")):
            stale.unlink(missing_ok=True)  # ssh-keygen would ask "Overwrite (y/n)?"
        procs.append(
            subprocess.Popen(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    errors = [(p.communicate()[1].decode(errors="replace").strip(), p.returncode) for p in procs]
    for message, code in errors:
        if code:
            raise SandboxError(f"ssh-keygen failed: {message or f'exit status {code}'}")


def plain(text: str) -> str:
    """``text`` if it can sit between double quotes in sshd_config (no escaping exists there)."""
    if any(c in text for c in '"\\\n\r'):
        raise SandboxError(f"cannot write {text!r} into sshd_config (quote, backslash or newline)")
    return text
