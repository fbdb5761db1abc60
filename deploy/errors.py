"""The exceptions `deploy` raises on purpose, and the exit code each one means.

Every error a user can cause or meet is a `DeployError`; the CLI maps ``exit_code`` to the
process exit status in one place and prints ``str(error)`` as one line. Anything else that
escapes is a bug and is shown with a traceback.

    DeployError (1)
    ├── InputError (2)                 bad options, inventory, playbook or variables; no host touched
    ├── HostNotAttempted (4)           nothing was done on that host
    │   ├── HostUnreachable            TCP/SSH/auth failure, connect timeout
    │   ├── HostKeyUnknown             not in known_hosts (and no --accept-new-host-keys)
    │   ├── HostKeyMismatch            known_hosts has another key for this host
    │   ├── LockHeld                   another run holds state_dir/lock
    │   ├── BecomeFailed               sudo refused (wrong password, not in sudoers, no -K)
    │   ├── StateDirDenied             state_dir cannot be created or locked: permission denied
    │   ├── ServiceUnsupported         the server runs in a container or on several nodes
    │   └── ServerRefused              the port's holder is not one tree of a named user (preflight)
    ├── StepFailed (1)                 a step could not do or prove its job
    │   ├── PermissionDenied           the acting user may not read or write a path
    │   ├── EditError                  an edit cannot be computed (class missing, conflict, ...)
    │   ├── CheckFailed                a verification found the content wrong
    │   └── RemoteCommandFailed        a command on the host exited badly or timed out
    └── RollbackFailed (3)             an undo could not be completed; a human must look
        └── ForeignChange              the file changed since we wrote it; undo refused
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_ROLLED_BACK = 1
EXIT_INPUT = 2
EXIT_ROLLBACK_FAILED = 3
EXIT_NOT_ATTEMPTED = 4
#: ``--check --detailed-exitcode`` only: every host was looked at and some would change (drift).
EXIT_CHANGES_PENDING = 5

#: DESIGN.md: with several hosts the most serious wins: 3, then 1, then 4, then 5, then 0.
SEVERITY = {
    EXIT_ROLLBACK_FAILED: 4,
    EXIT_ROLLED_BACK: 3,
    EXIT_INPUT: 3,
    EXIT_NOT_ATTEMPTED: 2,
    EXIT_CHANGES_PENDING: 1,
    EXIT_OK: 0,
}


def worst_exit_code(codes: list[int]) -> int:
    """Combine per-host exit codes into the run's code (3 > 1 > 4 > 5 > 0)."""
    return max(codes, key=lambda c: SEVERITY.get(c, 1), default=EXIT_OK)


class DeployError(Exception):
    """Root of every expected failure; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_ROLLED_BACK


@dataclass
class SourcePosition:
    """Where in an input file a problem is: 1-based line and column, and the key path."""

    file: str
    line: int | None = None
    column: int | None = None
    field: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


class InputError(DeployError):
    """Invalid input: reported as ``file:line:col field: message``; nothing was touched (no
    host contacted)."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, position: SourcePosition | None = None) -> None:
        self.message = message
        self.position = position
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.position is None:
            return self.message
        prefix = str(self.position)
        if self.position.field:
            prefix += f" {self.position.field}"
        return f"{prefix}: {self.message}"


class HostNotAttempted(DeployError):
    """Nothing was changed on the host: it could not be reached, trusted or locked."""

    exit_code = EXIT_NOT_ATTEMPTED


class HostUnreachable(HostNotAttempted):
    """The TCP connection, SSH handshake or authentication failed, or timed out."""


class HostKeyUnknown(HostNotAttempted):
    """The host's key is not in known_hosts, and accepting new keys was not asked for."""


class HostKeyMismatch(HostNotAttempted):
    """known_hosts holds a different key for this host: possibly a man-in-the-middle."""


class LockHeld(HostNotAttempted):
    """Another run holds ``state_dir/lock`` on this host."""


class BecomeFailed(HostNotAttempted):
    """``become`` was asked for and sudo refused: nothing was done on the host."""


class StateDirDenied(HostNotAttempted):
    """The login user may not create or lock state_dir: nothing was done on the host."""


class ServerRefused(HostNotAttempted):
    """The service's port is held by more than one process tree or user, or by a user the
    playbook does not name, or its restart would run from a path another user can change:
    refused before anything on the host was touched."""


class StateDirUntrusted(HostNotAttempted):
    """state_dir or a parent can be changed by a user other than root and the login user."""


class ServiceUnsupported(HostNotAttempted):
    """The server runs in a container, or on several nodes: deploy cannot restart it as it
    runs, so it refuses before anything is touched (`deploy.services.identity`)."""


class StepFailed(DeployError):
    """A step could not do, or could not prove, its job; the host gets rolled back."""

    exit_code = EXIT_ROLLED_BACK


class PermissionDenied(StepFailed):
    """The acting user may not read or write ``path`` (one line, with what to do)."""

    def __init__(self, host: str, path: str, user: str = "", become: bool = False) -> None:
        self.host, self.path, self.user, self.become = host, path, user, become
        who = f" as {user}" if user else ""
        as_root = become or user == "root"
        hint = "check the path's owner, mode and filesystem" if as_root else "use become (-b)"
        super().__init__(f"permission denied{who} on {host}: {path}; {hint}")

    def by(self, user: str, become: bool) -> PermissionDenied:
        """The same refusal, naming the user the host's operations run as."""
        return PermissionDenied(self.host, self.path, user, become)


class EditError(StepFailed):
    """The new content cannot be computed: class not found, conflicting method, bad hunk..."""


class CheckFailed(StepFailed):
    """A verification ran and found the content or the host not as required."""


@dataclass
class CommandResult:
    """What a command on a host did: exit status, output, and how long it took."""

    command: str
    exit_status: int
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

    def tail(self, lines: int = 10) -> str:
        """The last lines of stderr, or of stdout when stderr is empty: for one-line messages."""
        text = self.stderr.strip() or self.stdout.strip()
        return "\n".join(text.splitlines()[-lines:])


class RemoteCommandFailed(StepFailed):
    """A command on the host exited with an unexpected status or timed out."""

    def __init__(self, message: str, result: CommandResult | None = None) -> None:
        self.result = result
        super().__init__(message)


class NothingTouched(StepFailed):
    """A check before the first change refused: nothing on the host was touched, so the host
    counts as not attempted (exit 4), not as a failed change."""


class Interrupted(StepFailed):
    """A wait was cut short by the run's cancel (Ctrl-C, SIGTERM, ``--timeout``): what it
    waited for is abandoned at once and the host is put back, as after a failure."""


class RollbackFailed(DeployError):
    """An undo could not be completed: the host is in a state a human must look at."""

    exit_code = EXIT_ROLLBACK_FAILED


class ForeignChange(RollbackFailed):
    """The file no longer has the content we wrote: someone else changed it; undo refused."""
