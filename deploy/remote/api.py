"""`Host`: what the engine and the steps may do on a host — the only door they know.

`deploy.remote.host.RemoteHost` implements it. Layers above `deploy.remote` annotate with
`Host`, never a concrete class, so no paramiko or Fabric type leaks out. A host does nothing
until `open`; `close` ends its connection and every command still running on it; one thread
per host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack

from deploy.errors import CommandResult
from deploy.remote.become import Become
from deploy.remote.calls import Call, FileStat
from deploy.remote.session import Session
from deploy.remote.transport import Channel

if TYPE_CHECKING:
    from deploy.remote.http import HttpResponse


class WriteOptions(TypedDict, total=False):
    """How `Host.write_atomic` replaces a file (every key optional, defaults in brackets)."""

    #: Owner, mode and xattrs to give the new file (undo: what the journal recorded) [the
    #: current target's, kept: setuid and capabilities included].
    mode: int | None
    uid: int | None
    gid: int | None
    xattrs: dict[str, str] | None
    #: Refuse unless the target still holds these bytes (a lost update otherwise) [no check].
    expect_sha256: str | None
    #: Write even where group or others can write in the directory [refused].
    unsafe_dir: bool
    #: ``"allow"``: replace a file with other hard links ["refuse"].
    hardlinks: Literal["refuse", "allow"]
    #: ``(path, content)``: a file on the host that holds ``content``; only what the new bytes
    #: do not share with it at their head and tail is sent, the host checking both ends by
    #: sha256 [the whole of ``data`` sent].
    known: tuple[str, bytes] | None
    #: Wait for the answer rather than letting it surface at the next `flush` [False].
    wait: bool


class Host(Protocol):
    """One host for one run: commands, files, HTTP to its services (see the module docstring)."""

    name: str
    #: Round trips by kind: ``exec`` (a login shell), ``cmd`` (in the lock's shell), ``sftp``,
    #: ``call`` (a helper request), ``wait`` (a time the client blocked for answers); and
    #: ``sent``, the bytes of the requests to the helper and the lock's shell.
    ops: dict[str, int]
    #: The lock's shell while the lock is held (`deploy.remote.lock` sets and clears it).
    session: Session | None
    #: Set when every operation runs through sudo (`deploy.remote.become`).
    become: Become | None
    #: What the lock's round trip read and ran ahead (`deploy.remote.lock` sets them), for
    #: `fetch` and `ran_ahead`, each used once.
    prefetched: dict[str, tuple[FileStat | None, bytes | None]]
    speculated: dict[str, tuple[int, bytes, str]]

    @property
    def login_user(self) -> str: ...
    @property
    def acting_user(self) -> str:
        """Whom the host's operations run as: the become user, else the login user."""
        ...

    def open(self) -> Host:
        """Connect (idempotent). Raises `HostNotAttempted` subclasses, or `InputError`."""
        ...

    def close(self) -> None: ...
    def start(self, command: str) -> Channel:
        """Start ``command`` on its own channel (a login shell); the caller reads it."""
        ...

    def run(
        self,
        command: str,
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run a shell command (quoted by the caller); in the lock's shell while it is held."""
        ...

    def send_check(self, command: str, *, timeout: float) -> Call | None:
        """Send ``command`` to the lock's shell as a ``CHECK`` (`deploy.remote.session`: what
        follows a failed one is skipped), without waiting: its answer comes with the next
        `flush`. None when no lock's shell is held (then `run` it). `HostUnreachable`: the
        connection was lost."""
        ...

    def stat(self, path: str) -> FileStat | None: ...
    def fetch(self, path: str) -> tuple[FileStat | None, bytes | None]: ...
    def read(self, path: str) -> bytes: ...
    def write_atomic(
        self, path: str, data: bytes, **options: Unpack[WriteOptions]
    ) -> Call | None: ...
    def append_file(self, path: str, data: bytes, *, durable: bool) -> Call | None: ...
    def mkdir(self, path: str, mode: int = 0o700) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def remove(self, path: str) -> None: ...
    def remove_temp_leftovers(self, path: str) -> list[str]: ...
    def flush(self) -> None:
        """Wait for every request sent without waiting; raise the first failure."""
        ...

    def ran_ahead(self, command: str) -> tuple[int, bytes, str] | None:
        """The answer of ``command`` if it was sent ahead with the lock (exit status, stdout,
        stderr), handed out once; None if it was not (then run it)."""
        ...

    def forget_read_ahead(self) -> None:
        """Drop every file and command answer read ahead and not yet used: something is about
        to change the host outside the steps that declared those reads (an undo, a command)."""
        ...

    def read_ahead(self, paths: list[str]) -> None:
        """Without the lock: read ``paths`` in one exec, for `fetch` to answer."""
        ...

    def http(
        self,
        address: str,
        port: int,
        method: str,
        path: str,
        *,
        body: Any = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """One HTTP request to ``address:port`` as seen from the host (its loopback):
        `deploy.remote.http.request`, which says what it raises."""
        ...
