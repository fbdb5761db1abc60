"""Read a file's status and content through the lock's shell, in one round trip.

Where a host's sshd runs ``sftp-server`` (Debian's default) rather than ``internal-sftp``, the
first SFTP request of a connection starts it through the user's login shell — ``.bashrc``
included, ~100 ms where that runs ``pyenv init``. A run that only needs to read (a re-run
that finds every file already in its desired state) then need not open SFTP at all: the lock's
shell, already running, answers ``stat`` and ``cat`` in one command (`deploy.remote.session`).

Pure: the command to send and the parsing of its answer. `RemoteHost.fetch` runs it.
"""

from __future__ import annotations

import shlex

from deploy.errors import StepFailed
from deploy.remote.sftpfile import FileStat

#: GNU/BusyBox ``stat`` without ``-L`` describes the path itself (lstat), as SFTP's lstat does.
#: Exit 3: stat failed (its message on stderr); then cat only a regular file, never through
#: a symlink. ``LC_ALL=C`` keeps the messages parseable.
_SCRIPT = (
    "p={path}; s=$(LC_ALL=C stat -c '%f %u %g %s %Y' -- \"$p\") || exit 3; "
    "printf '%s\\n' \"$s\"; "
    'if [ -f "$p" ] && [ ! -h "$p" ]; then LC_ALL=C exec cat -- "$p"; fi'
)
EXIT_STAT_FAILED = 3
EXIT_NOT_FOUND = 127


def fetch_command(path: str) -> str:
    """The shell command whose answer `parse_fetch` reads."""
    return _SCRIPT.format(path=shlex.quote(path))


def parse_fetch(
    host: str, path: str, status: int, out: bytes, err: bytes
) -> tuple[FileStat | None, bytes | None] | None:
    """(lstat, content) from the command's answer.

    The status is None when ``path`` does not exist; the content is None unless ``path`` is a
    regular file (or when it disappeared between the two). The whole answer is None when
    the host cannot answer this way (no ``stat`` command, an output it does not recognise):
    the caller then asks over SFTP.

    Raises:
        StepFailed: permission denied, or another error the host reported.
    """
    message = err.decode("utf-8", "replace").strip().splitlines()
    last = message[-1] if message else f"exit status {status}"
    if status == EXIT_NOT_FOUND:
        return None
    if status == EXIT_STAT_FAILED:
        if "No such file or directory" in last:
            return None, None
        if "Permission denied" in last:
            raise StepFailed(f"{host}: permission denied reading the status of {path}")
        raise StepFailed(f"{host}: cannot read the status of {path}: {last}")
    head, newline, content = out.partition(b"\n")
    fields = head.decode("ascii", "replace").split()
    if not newline or len(fields) != 5:
        return None
    try:
        mode, uid, gid, size, mtime = int(fields[0], 16), *(int(f) for f in fields[1:])
    except ValueError:
        return None
    info = FileStat(path=path, mode=mode, uid=uid, gid=gid, size=size, mtime=float(mtime))
    if status != 0:
        if "No such file or directory" in last:
            return info, None  # removed between stat and cat
        if "Permission denied" in last:
            raise StepFailed(f"{host}: permission denied reading {path}")
        raise StepFailed(f"{host}: failed reading {path}: {last}")
    return info, content if info.is_file else None
