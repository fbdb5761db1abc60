"""What the lock's command line shows other users of the host (`deploy.remote.lock`).

The requests sent ahead with the lock travel in its exec's command line, which any local user
can read (``ps``, /proc/PID/cmdline) while the run holds the lock. Only paths and check code
may travel so (`lock.CARRIED_OPS`): a file's contents never do, and a request of any other
kind is sent on stdin instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.remote import lock as lockmod
from tests.unit.local_host import LocalHost

SECRET = "TOKEN=hunter2-do-not-show"


def _lock_command_lines(state: Path) -> list[str]:
    """The command lines of the processes running the lock script for ``state``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = entry.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "_dZ=" in text and str(state) in text:
            found.append(text)
    return found


def _take(tmp_path: Path) -> tuple[list[str], Path, bytes]:
    home, state, read = tmp_path / "home", tmp_path / "state", tmp_path / "app.env"
    home.mkdir(mode=0o700)
    read.write_text(SECRET + "\n")
    with LocalHost("local", home=str(home)) as host:
        held = lockmod.acquire(host, str(state), {"run_id": "t"}, prefetch=[str(read)])
        try:
            lines = _lock_command_lines(state)
            _, content = host.fetch(str(read))
        finally:
            held.release()
    return lines, read, content


def test_the_command_line_shows_paths_read_never_contents(tmp_path: Path) -> None:
    lines, read, content = _take(tmp_path)
    assert content == (SECRET + "\n").encode()
    assert lines, "no process runs the lock script"
    assert any(str(read) in line for line in lines), "the read was not carried"
    assert not any("hunter2" in line for line in lines), lines


def test_requests_of_other_kinds_are_not_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With reads not among `CARRIED_OPS`, the read goes on stdin: the path is not in the
    command line, and the run gets the file all the same."""
    monkeypatch.setattr(lockmod, "CARRIED_OPS", frozenset({"write"}))
    lines, read, content = _take(tmp_path)
    assert content == (SECRET + "\n").encode()
    assert lines and not any(str(read) in line for line in lines), lines
