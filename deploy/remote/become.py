"""become: every host operation of a run as another user (root by default), through sudo.

A run reaches a host through the lock's exec (whose shell serves every command), the odd exec
before the lock, and SFTP. Under become each is opened through sudo, so all that goes through
it runs as ``become_user``: an exec runs ``POSIXLY_CORRECT=y && \\exec /usr/bin/sudo -u USER --
/bin/sh -c 'echo NONCE >&2; exec /bin/sh -c "$1"' sh COMMAND`` (`SUDO_LINE`: why each part); SFTP is
the host's ``sftp-server`` started the same way, never the login user's subsystem.

Without a password (no ``-K``, no ``become_password_env``) sudo runs with ``-n``: one that
would ask fails at once, in one line, instead of hanging. With one,
``sudo -S -p MARKER`` prints a random marker on stderr when it asks, and the password goes on
stdin then, once, never on a command line or in a log; a second marker means it was refused.
The nonce on stderr says sudo started the command; whatever sudo printed before it ("not in
the sudoers file") is its refusal, which `refusal` turns into one line (`BecomeFailed`, exit
4: nothing was done on the host).
"""

from __future__ import annotations

import secrets
import select
import shlex
import time
from dataclasses import dataclass

from deploy.errors import BecomeFailed
from deploy.remote.transport import Channel, rest_after_exit

#: Where Debian/Ubuntu, RHEL/Fedora, Arch and Alpine keep OpenSSH's sftp-server.
SFTP_SERVERS = (
    "/usr/lib/openssh/sftp-server",
    "/usr/libexec/openssh/sftp-server",
    "/usr/lib/ssh/sftp-server",
    "/usr/libexec/sftp-server",
)


#: How the login shell starts sudo (`SUDO_LIMITS` says why each part): bash lets a function be
#: named ``exec`` or ``/usr/bin/sudo``, but not in POSIX mode, which the plain assignment
#: ``POSIXLY_CORRECT=y`` (no function can intercept it) turns on; a ``readonly`` one fails the
#: assignment, and the ``&&`` then runs nothing. dash finds special builtins first anyway.
SUDO_LINE = "POSIXLY_CORRECT=y && \\exec /usr/bin/sudo"

#: What the sudo line cannot defend against (docs/operations.md shows this text).
SUDO_LIMITS = """deploy starts sudo as `POSIXLY_CORRECT=y && \\exec /usr/bin/sudo ...`: an absolute path
(no `PATH` lookup), `exec` quoted (no alias applies) in POSIX mode (where no function can take
the place of `exec`), so a `sudo` or `exec` function or alias in the login user's `~/.bashrc`,
`$BASH_ENV` or profile never sees sudo's command or the become password. That protects against
a login user's shell customisations, not against the login user: whoever controls that account
controls the shell sshd starts for it (its login shell, `~/.ssh/rc`, bash's `enable -n exec`)
and can read a password sent to it. So for a dedicated deploy user, prefer a `NOPASSWD`
sudoers rule (no `-K`, no `become_password_env`): there is then no password to capture, and
the rule can be limited to that user. A become password, when used, travels only on sudo's
stdin after its prompt, never in a command line, log or report.
"""


@dataclass(frozen=True)
class Become:
    """How to become ``user`` on host ``host`` logged in as ``login``; ``password`` may be None."""

    host: str
    login: str
    user: str
    password: str | None = None

    def wrap(self, command: str) -> tuple[str, str, str]:
        """(the sudo command line, the prompt marker, the start nonce) for ``command``."""
        marker = f"[deploy-sudo-{secrets.token_hex(8)}]"
        nonce = f"deploy-become-{secrets.token_hex(8)}"
        inner = f'printf "%s\\n" {nonce} >&2; exec /bin/sh -c "$1"'
        how = f"-S -p {shlex.quote(marker)}" if self.password is not None else "-n"
        line = (
            f"{SUDO_LINE} {how} -H -u {shlex.quote(self.user)} -- "
            f"/bin/sh -c {shlex.quote(inner)} sh {shlex.quote(command)}"
        )
        return line, marker, nonce

    def refusal(self, said: str) -> BecomeFailed:
        """One line for sudo's refusal; ``said`` is what it printed on stderr."""
        text = " ".join(said.split())
        who = f"{self.host}: sudo as {self.login} -> {self.user} refused"
        if "not found" in text and "sudo" in text:
            return BecomeFailed(f"{self.host}: sudo is not installed; install it or drop become")
        if "password is required" in text:
            return BecomeFailed(
                f"{who}: sudo asks for a password; pass -K (--ask-become-pass) or set "
                "become_password_env, or give the user NOPASSWD in sudoers"
            )
        if "incorrect password" in text or "Sorry, try again" in text:
            return BecomeFailed(f"{who}: the become password is wrong; nothing was done")
        if "not in the sudoers" in text or "not allowed" in text or "may not run" in text:
            return BecomeFailed(
                f"{who}: {self.login} may not run commands as {self.user} (sudoers); add a "
                "sudoers rule for it, or drop become"
            )
        last = text[-160:] if text else "no message"
        return BecomeFailed(f"{who}: {last}")


def sftp_command() -> str:
    """Start the first sftp-server found (exit 127 with a message if there is none)."""
    tries = " ".join(shlex.quote(p) for p in SFTP_SERVERS)
    return (
        f'for p in {tries}; do [ -x "$p" ] && exec "$p"; done; '
        'echo "no sftp-server found on the host" >&2; exit 127'
    )


def handshake(channel: Channel, how: Become, marker: str, nonce: str, timeout: float) -> bytes:
    """Wait until sudo starts the command, answering its password prompt once; return what
    the command already wrote to stderr after the nonce (the caller keeps it).

    Raises:
        BecomeFailed: sudo refused, asked twice, or did not answer within ``timeout``.
    """
    seen = b""
    asked = 0
    deadline = time.monotonic() + timeout
    mark, start = marker.encode(), nonce.encode() + b"\n"
    while True:
        if start in seen:
            return seen.partition(start)[2]
        if seen.count(mark) > asked:
            asked += 1
            if asked > 1 or how.password is None:
                channel.close()
                raise how.refusal("Sorry, try again.")
            channel.sendall((how.password + "\n").encode())
            continue
        if channel.recv_stderr_ready():
            seen += channel.recv_stderr(65536)
            continue
        if channel.exit_status_ready() and not channel.recv_stderr_ready():
            seen += rest_after_exit(channel)[1]  # sudo's last words may come after its status
            channel.close()
            raise how.refusal(seen.replace(mark, b"").decode("utf-8", "replace"))
        left = deadline - time.monotonic()
        if left <= 0:
            channel.close()
            raise BecomeFailed(f"{how.host}: sudo did not answer within {timeout:g} s")
        select.select([channel], [], [], min(0.05, left))
