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

from deploy.errors import PermissionDenied, StepFailed
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
            raise PermissionDenied(host, path)
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
            raise PermissionDenied(host, path)
        raise StepFailed(f"{host}: failed reading {path}: {last}")
    return info, content if info.is_file else None


# -- prefetch: the same answer for the files a run will read, in the lock's own exec ----------

#: Per path: ``@@NONCE FILE <stat exit> <stat fields>`` then, for a regular file that is not a
#: symlink, its bytes, then a newline. The lock script runs this before its command loop
#: (`deploy.remote.lock`), so the files a run reads cost no round trip of their own and no
#: process start of the loop (~3 ms of the host's CPU per file). The bytes are framed by the
#: run's random nonce rather than by a length, so that a file that grows or shrinks between
#: ``stat`` and ``cat`` cannot break the framing: `parse_prefetch` then sees a size that
#: differs from the status and drops the entry, and the step fetches the file as usual.
_PREFETCH = (
    "_dq=$(LC_ALL=C stat -c '%f %u %g %s %Y' -- {path} 2>/dev/null) && _dr=0 || _dr=3; "
    'printf \'@@%s FILE %s %s\\n\' {nonce} "$_dr" "$_dq"; '
    'if [ "$_dr" = 0 ] && [ -f {path} ] && [ ! -h {path} ]; then '
    "LC_ALL=C cat -- {path} 2>/dev/null; fi; echo"
)


def prefetch_script(paths: list[str], nonce: str) -> str:
    """Shell lines answering `parse_prefetch` for ``paths``, ending with ``@@NONCE END``."""
    lines = [_PREFETCH.format(path=shlex.quote(p), nonce=shlex.quote(nonce)) for p in paths]
    return "\n".join([*lines, f"printf '@@%s END\\n' {shlex.quote(nonce)}", ""])


def prefetch_end(nonce: str) -> bytes:
    """The line that ends a prefetch answer."""
    return f"@@{nonce} END\n".encode()


def parse_prefetch(
    paths: list[str], data: bytes, nonce: str
) -> dict[str, tuple[FileStat, bytes | None]]:
    """What `prefetch_script` answered, for the paths it could answer with certainty.

    A path is left out — its step then fetches it — when ``stat`` failed (missing, no
    permission: the fetch words the error), or when the bytes read do not have the size
    ``stat`` gave (the file changed in between, or ``cat`` failed). Framing is by the nonce,
    so no content can end a record early; an answer with the wrong number of records is
    ignored as a whole.
    """
    records = data.split(f"@@{nonce} ".encode())
    if len(records) != len(paths) + 2 or records[0] or records[-1] != b"END\n":
        return {}
    out: dict[str, tuple[FileStat, bytes | None]] = {}
    for path, record in zip(paths, records[1:-1], strict=True):
        head, newline, body = record.partition(b"\n")
        fields = head.decode("ascii", "replace").split()
        if (
            not newline
            or not body.endswith(b"\n")
            or len(fields) != 7
            or fields[:2] != ["FILE", "0"]
        ):
            continue
        try:
            mode, uid, gid, size, mtime = int(fields[2], 16), *(int(f) for f in fields[3:])
        except ValueError:
            continue
        info = FileStat(path=path, mode=mode, uid=uid, gid=gid, size=size, mtime=float(mtime))
        content = body[:-1]
        if info.is_file:
            if len(content) != info.size:
                continue
            out[path] = (info, content)
        elif not content:
            out[path] = (info, None)
    return out
