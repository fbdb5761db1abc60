"""Parsing the lock shell's answer to "stat and cat this file" (deploy/remote/shellfile.py)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from deploy.errors import StepFailed
from deploy.remote.shellfile import (
    fetch_command,
    parse_fetch,
    parse_prefetch,
    prefetch_end,
    prefetch_script,
)

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
    with pytest.raises(StepFailed, match="permission denied on h: /f; use become"):
        parse_fetch("h", "/f", 3, b"", b"stat: cannot statx '/f': Permission denied\n")
    with pytest.raises(StepFailed, match="permission denied on h: /f; use become"):
        parse_fetch("h", "/f", 1, REGULAR, b"cat: /f: Permission denied\n")
    assert parse_fetch("h", "/f", 1, REGULAR, b"cat: /f: No such file or directory\n")[1] is None  # type: ignore[index]
    assert parse_fetch("h", "/f", 127, b"", b"sh: stat: not found\n") is None
    assert parse_fetch("h", "/f", 0, b"garbage\n", b"") is None


def test_the_path_is_one_quoted_word() -> None:
    assert "p='/srv/it'\"'\"'s here.py';" in fetch_command("/srv/it's here.py")


# -- prefetch: the same answers inside the lock's exec, framed by the run's nonce -------------

NONCE = "0123456789abcdef"


def _prefetch(shell: str, paths: list[str]) -> bytes:
    script = prefetch_script(paths, NONCE)
    return subprocess.run([shell, "-c", script], capture_output=True, check=True).stdout


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_prefetch_answers_files_whatever_their_bytes(tmp_path: Path, shell: str) -> None:
    # Content that imitates every marker: READY, a wrong nonce, END, no final newline, NULs.
    tricky = b"READY\n@@0000 END\n@@" + NONCE.encode()[:8] + b" FILE 0 x\n\x00\xff no newline"
    odd = tmp_path / "it's $(touch pwned) `x`\nnewline.py"
    odd.write_bytes(tricky)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    link = tmp_path / "link"
    link.symlink_to(odd)
    paths = [str(odd), str(empty), str(link), str(tmp_path), str(tmp_path / "missing")]
    answer = _prefetch(shell, paths)
    assert answer.endswith(prefetch_end(NONCE))
    got = parse_prefetch(paths, answer, NONCE)
    assert got[str(odd)][1] == tricky and got[str(odd)][0].size == len(tricky)
    assert got[str(empty)][1] == b""
    assert got[str(link)][0].is_symlink and got[str(link)][1] is None, "never through a link"
    assert not got[str(tmp_path)][0].is_file and got[str(tmp_path)][1] is None
    assert str(tmp_path / "missing") not in got, "left to the step's own fetch and its message"
    assert (
        got[str(odd)][0]
        == parse_fetch(  # the same status as the step's own fetch gives
            "h", str(odd), 0, *_fetch(str(odd))
        )[0]
    )  # type: ignore[index]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def _fetch(path: str) -> tuple[bytes, bytes]:
    proc = subprocess.run(["sh", "-c", fetch_command(path)], capture_output=True, check=True)
    return proc.stdout, proc.stderr


def test_prefetch_drops_a_file_that_changed_between_stat_and_cat() -> None:
    good = b"@@%s FILE 0 81a4 0 0 5 1700000000\nhello\n" % NONCE.encode()
    grown = b"@@%s FILE 0 81a4 0 0 5 1700000000\nhello world\n" % NONCE.encode()
    end = prefetch_end(NONCE)
    assert parse_prefetch(["/a"], good + end, NONCE)["/a"][1] == b"hello"
    assert parse_prefetch(["/a"], grown + end, NONCE) == {}
    assert parse_prefetch(["/a", "/b"], good + grown + end, NONCE).keys() == {"/a"}


def test_prefetch_answers_out_of_frame_are_ignored_whole() -> None:
    good = b"@@%s FILE 0 81a4 0 0 5 1700000000\nhello\n" % NONCE.encode()
    end = prefetch_end(NONCE)
    assert parse_prefetch(["/a"], good, NONCE) == {}, "no END"
    assert parse_prefetch(["/a", "/b"], good + end, NONCE) == {}, "a record missing"
    assert parse_prefetch(["/a"], b"noise" + good + end, NONCE) == {}
    stat_failed = b"@@%s FILE 3 \n\n" % NONCE.encode()
    assert parse_prefetch(["/a"], stat_failed + end, NONCE) == {}
