"""The file helper's start (`deploy.remote.helperboot`): its code kept in state_dir between
runs, used only when it is exactly what this source and interpreter compile to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.remote import helperboot
from deploy.remote.hostfiles import HELPER_BOOT
from deploy.remote.hostprogram import program

#: A stand-in helper: says where its code came from and what argv it was given.
SOURCE = "import sys\nprint('ran', __name__, sys.argv)\n"


def _start(state_dir: Path, source: str = SOURCE) -> tuple[str, list[Path]]:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", HELPER_BOOT, source, "3", "4", str(state_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    kept = sorted(p for p in state_dir.iterdir() if p.name.startswith(helperboot.PREFIX))
    return proc.stdout, kept


def test_the_code_is_kept_and_then_used(tmp_path: Path) -> None:
    out, kept = _start(tmp_path)
    assert out == "ran __main__ ['-c', '3', '4']\n"
    assert len(kept) == 1 and (kept[0].stat().st_mode & 0o777) == 0o600
    first = kept[0].read_bytes()
    out, again = _start(tmp_path)
    assert out == "ran __main__ ['-c', '3', '4']\n" and again == kept
    assert kept[0].read_bytes() == first, "kept code was used, not rewritten"


def test_a_damaged_file_is_never_loaded(tmp_path: Path) -> None:
    _, (kept,) = _start(tmp_path)
    data = bytearray(kept.read_bytes())
    data[-1] ^= 0xFF
    kept.write_bytes(bytes(data))
    out, (again,) = _start(tmp_path)
    assert out.startswith("ran ") and again == kept
    assert again.read_bytes() != bytes(data), "recompiled and rewritten"


def test_another_source_gets_its_own_file_and_the_old_one_goes(tmp_path: Path) -> None:
    _, (old,) = _start(tmp_path)
    out, (new,) = _start(tmp_path, SOURCE + "print('v2')\n")
    assert out.endswith("v2\n") and new != old and not old.exists()


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    _, (kept,) = _start(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    kept.rename(elsewhere)
    elsewhere.write_bytes(b"not code")
    kept.symlink_to(elsewhere)
    out, _ = _start(tmp_path)
    # compiled afresh; the link itself replaced by a new file, its target untouched
    assert out.startswith("ran ") and not kept.is_symlink()
    assert elsewhere.read_bytes() == b"not code"


def test_an_unwritable_state_dir_costs_only_the_cache(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", HELPER_BOOT, SOURCE, "3", "4", str(missing)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.startswith("ran ") and not missing.exists()


def test_the_real_helper_starts_through_it(tmp_path: Path) -> None:
    """The file helper itself, served one request over its pipes, from kept code too."""
    import json

    target = tmp_path / "f"
    target.write_bytes(b"hello\n")
    for _ in range(2):
        go_r, go_w = os.pipe()
        ack_r, ack_w = os.pipe()
        head = json.dumps({"op": "read", "path": str(target)}).encode()
        fds = (str(go_r), str(ack_w), str(tmp_path))
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", HELPER_BOOT, program("fileagent"), *fds],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(go_r, ack_w),
        )
        os.close(go_r)
        os.close(ack_w)
        assert proc.stdin is not None
        proc.stdin.write(head)
        proc.stdin.close()
        os.write(go_w, f"{len(head)} 0\n".encode())
        os.close(go_w)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        proc.wait(30)
        os.close(ack_r)
        assert proc.returncode == 0 and out.endswith(b"hello\n"), out
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(helperboot.PREFIX)]) == 1


def test_a_write_that_fails_leaves_no_temp_file(tmp_path: Path) -> None:
    """Something else in the way of the name (here a directory): the helper still starts from
    the source, and the temp file written for the cache does not stay behind, run after run."""
    _, (kept,) = _start(tmp_path)
    kept.unlink()
    kept.mkdir()
    for _ in range(2):
        out, _ = _start(tmp_path)
        assert out == "ran __main__ ['-c', '3', '4']\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]


def _plant(kept: Path, code_text: str) -> None:
    """Replace the kept code with ``code_text``'s, digest and all (a well-formed file)."""
    import hashlib
    import marshal

    body = marshal.dumps(compile(code_text, "<planted>", "exec"))
    kept.write_bytes(hashlib.sha256(body).digest() + body)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_kept_code_another_user_owns_is_never_run(tmp_path: Path) -> None:
    """Issue 32 point 3: what is loaded to run is checked by fd first: a well-formed kept
    file that another user owns (or could write) is compiled afresh, never executed."""
    _, (kept,) = _start(tmp_path)
    _plant(kept, "print('PLANTED')\n")
    os.chown(kept, 65534, 65534)
    out, _ = _start(tmp_path)
    assert out == "ran __main__ ['-c', '3', '4']\n"
    _plant(kept, "print('PLANTED')\n")
    os.chown(kept, 0, 0)
    kept.chmod(0o666)
    out, _ = _start(tmp_path)
    assert out == "ran __main__ ['-c', '3', '4']\n"


def test_kept_code_in_a_dir_others_can_write_is_never_run(tmp_path: Path) -> None:
    _, (kept,) = _start(tmp_path)
    _plant(kept, "print('PLANTED')\n")
    planted = kept.read_bytes()
    tmp_path.chmod(0o777)
    try:
        out, left = _start(tmp_path)
    finally:
        tmp_path.chmod(0o700)
    assert out == "ran __main__ ['-c', '3', '4']\n"
    assert left == [kept] and kept.read_bytes() == planted  # nothing written there either
