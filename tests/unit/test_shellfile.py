"""Parsing the lock shell's answer to "stat and cat this file" (deploy/remote/shellfile.py)."""

from __future__ import annotations

import stat

import pytest

from deploy.errors import StepFailed
from deploy.remote.shellfile import fetch_command, parse_fetch

REGULAR = b"81a4 0 0 5 1700000000\n"  # 0o100644, root:root, 5 bytes


def test_a_regular_file_gives_its_status_and_exact_bytes() -> None:
    info, content = parse_fetch("h", "/f", 0, REGULAR + b"a\x00\xff\n\n", b"")  # type: ignore[misc]
    assert info is not None and info.is_file and info.permissions == 0o644
    assert (info.uid, info.gid, info.size, info.mtime) == (0, 0, 5, 1700000000.0)
    assert content == b"a\x00\xff\n\n"


def test_missing_symlink_and_directory() -> None:
    missing = b"stat: cannot statx '/f': No such file or directory\n"
    assert parse_fetch("h", "/f", 3, b"", missing) == (None, None)
    link = f"{stat.S_IFLNK | 0o777:x} 0 0 4 1\n".encode()
    info, content = parse_fetch("h", "/f", 0, link, b"")  # type: ignore[misc]
    assert info is not None and info.is_symlink and content is None
    folder = f"{stat.S_IFDIR | 0o755:x} 0 0 4096 1\n".encode()
    info, content = parse_fetch("h", "/f", 0, folder, b"")  # type: ignore[misc]
    assert info is not None and not info.is_file and content is None


def test_errors_are_named_and_unknown_answers_fall_back_to_sftp() -> None:
    with pytest.raises(StepFailed, match="permission denied reading the status of /f"):
        parse_fetch("h", "/f", 3, b"", b"stat: cannot statx '/f': Permission denied\n")
    with pytest.raises(StepFailed, match="h: permission denied reading /f"):
        parse_fetch("h", "/f", 1, REGULAR, b"cat: /f: Permission denied\n")
    assert parse_fetch("h", "/f", 1, REGULAR, b"cat: /f: No such file or directory\n")[1] is None  # type: ignore[index]
    assert parse_fetch("h", "/f", 127, b"", b"sh: stat: not found\n") is None
    assert parse_fetch("h", "/f", 0, b"garbage\n", b"") is None


def test_the_path_is_one_quoted_word() -> None:
    assert "p='/srv/it'\"'\"'s here.py';" in fetch_command("/srv/it's here.py")
