"""The compile record's lookup in the file helper (`deploy.hostpy.fileagent_compiled`) says
"reused" exactly when the shell check sent ahead would (`deploy.checks.compile`), on real
records written by the real shell check and this interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.checks.compile import (
    AHEAD_STATUS,
    AHEAD_VARIABLE,
    ahead_answer,
    ahead_lookup,
    compile_command,
)
from deploy.hostpy import fileagent_compiled
from deploy.hostpy.fileagent_compiled import (
    compile_here,
    compiled,
    interpreter_identity,
    is_this_interpreter,
)
from deploy.hostpy.fileagent_ops import sha256

PYTHON = sys.executable


def _shell(command: str, *, ahead: bool = False) -> tuple[int, bytes, str]:
    text = f"{AHEAD_VARIABLE}=1; {command}" if ahead else command
    proc = subprocess.run(["bash", "-c", text], capture_output=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr.decode()


def _both(python: str, path: Path, cache: Path) -> tuple[tuple[int, bytes, str] | None, bool]:
    """(the helper's answer as the step sees it, whether the shell sent ahead reused)."""
    command = compile_command(python, str(path), cache=str(cache))
    request = ahead_lookup(command)
    assert request is not None
    helper = ahead_answer(compiled(request, sha256))
    status, out, _ = _shell(command, ahead=True)
    assert status in (0, AHEAD_STATUS)
    if helper is not None:
        assert helper == (status, out, "")
    return helper, status == 0


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "model.py"
    path.write_text("class A:\n    def f(self):\n        return 1\n")
    cache = tmp_path / "state" / "compiled"
    status, _, err = _shell(compile_command(PYTHON, str(path), cache=str(cache)))
    assert status == 0, err
    if not any(cache.iterdir()):
        pytest.skip(f"{PYTHON} is not an interpreter the check records (a wrapper script?)")
    return path, cache


def test_a_recorded_pass_is_reused_by_both(recorded: tuple[Path, Path]) -> None:
    path, cache = recorded
    helper, shell = _both(PYTHON, path, cache)
    assert shell and helper is not None and helper[0] == 0


def compiled_request(path: Path, cache: Path) -> dict[str, object]:
    """The file helper's answer to the lookup the lock sends ahead."""
    return compiled({"python": PYTHON, "path": str(path), "cache": str(cache)}, sha256)


def test_through_a_symlink_to_the_interpreter_too(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    path, cache = recorded
    link = tmp_path / "venv-python"
    link.symlink_to(os.path.realpath(PYTHON))
    helper, shell = _both(str(link), path, cache)
    assert helper is not None and shell


def test_other_bytes_are_a_miss_for_both(recorded: tuple[Path, Path]) -> None:
    path, cache = recorded
    path.write_text("class A:\n    pass\n")
    assert _both(PYTHON, path, cache) == (None, False)


def test_a_record_of_another_interpreter_build_is_a_miss_for_both(
    recorded: tuple[Path, Path],
) -> None:
    """The record names the interpreter's files by size, device, inode, mtime and ctime: one
    of them changed (an upgrade in place) and neither reuses it."""
    path, cache = recorded
    (record,) = cache.iterdir()
    first, *others = record.read_text().rstrip("\n").split(" ")
    size, dev, ino, mtime, ctime = first.split(":")
    record.write_text(" ".join([f"{size}:{dev}:{ino}:{mtime}:{int(ctime) + 1}", *others]) + "\n")
    assert _both(PYTHON, path, cache) == (None, False)
    record.write_text("\n")
    assert _both(PYTHON, path, cache) == (None, False)


def test_the_helper_computes_the_identity_the_shell_records(
    recorded: tuple[Path, Path],
) -> None:
    _, cache = recorded
    (record,) = cache.iterdir()
    identity = interpreter_identity(PYTHON)
    assert identity is not None
    assert sorted(record.read_text().rstrip("\n").split(" ")) == sorted(identity)


def test_misses_never_fail(tmp_path: Path) -> None:
    for args in (
        {"python": PYTHON, "path": str(tmp_path / "missing.py"), "cache": str(tmp_path)},
        {"python": PYTHON, "path": str(tmp_path), "cache": str(tmp_path)},
        {"python": "python3", "path": __file__, "cache": str(tmp_path)},
        {"python": str(tmp_path / "nothing"), "path": __file__, "cache": str(tmp_path)},
        {"path": __file__},
    ):
        assert compiled(args, sha256)["reused"] is False


@pytest.mark.parametrize("python", ["/usr/bin/python3", "/opt/my env/bin/python"])
@pytest.mark.parametrize("path", ["/a/b.py", "/a b/c'd.py", "/q'; p=x; k=; f=; r="])
def test_only_the_exact_cached_check_of_an_absolute_interpreter_is_looked_up(
    python: str, path: str
) -> None:
    cache = "/var/lib/deploy/compiled"
    command = compile_command(python, path, cache=cache)
    assert ahead_lookup(command) == {
        "op": "compiled",
        "python": python,
        "path": path,
        "cache": cache,
    }
    assert ahead_lookup(command + " ") is None
    assert ahead_lookup(compile_command("python3", path, cache=cache)) is None
    assert ahead_lookup(compile_command(python, path)) is None
    assert ahead_lookup("echo " + command) is None


def test_the_check_itself_reuses_a_record_in_any_order(recorded: tuple[Path, Path]) -> None:
    """The check that is not sent ahead looks the record up in the interpreter it starts
    anyway; a record listed in another order (a shell's glob in another locale) is the same."""
    path, cache = recorded
    command = compile_command(PYTHON, str(path), cache=str(cache))
    status, out, _ = _shell(command)
    assert status == 0 and out.decode().startswith("deploy-compile: reused ")
    (record,) = cache.iterdir()
    record.write_text(" ".join(reversed(record.read_text().rstrip("\n").split(" "))) + "\n")
    status, out, _ = _shell(command)
    assert status == 0 and out.decode().startswith("deploy-compile: reused ")
    assert compiled_request(path, cache)["reused"] is True  # the helper, sent ahead


def test_a_failed_compile_is_never_recorded(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("def f(:\n")
    cache = tmp_path / "compiled"
    status, out, err = _shell(compile_command(PYTHON, str(path), cache=str(cache)))
    assert status == 1 and out == b"" and err.strip().startswith("SyntaxError: ")
    assert not cache.exists()


def test_a_missing_interpreter_is_127_as_before(tmp_path: Path) -> None:
    path = tmp_path / "ok.py"
    path.write_text("x = 1\n")
    for python in (str(tmp_path / "no-python"), "no-such-python-here"):
        status, _, _ = _shell(compile_command(python, str(path), cache=str(tmp_path / "c")))
        assert status == 127


def _here(path: Path, cache: Path) -> tuple[int, bytes, str]:
    answer = compile_here({"python": PYTHON, "path": str(path), "cache": str(cache)}, sha256)
    return answer["status"], answer["stdout"].encode(), answer["stderr"]


def test_the_helper_compiles_as_the_command_does(tmp_path: Path) -> None:
    """In the helper's own interpreter (this one, here) the check is the command's: the same
    status, output and record, the same reuse, the same one-line error."""
    assert is_this_interpreter(PYTHON) and not is_this_interpreter("/bin/sh")
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("class A:\n    x = 1\n")
    bad.write_text("def f(:\n    pass\n")
    for name in ("shell", "helper"):
        cache = tmp_path / name
        check = (
            _here
            if name == "helper"
            else (lambda p, c: _shell(compile_command(PYTHON, str(p), cache=str(c))))
        )
        first, again, failed = check(good, cache), check(good, cache), check(bad, cache)
        assert first[0] == 0 and first[1].decode().strip() == sha256(good.read_bytes()).hexdigest()
        assert again[0] == 0 and again[1].decode().startswith("deploy-compile: reused ")
        assert failed[0] == 1 and failed[1] == b""
        assert failed[2].strip().startswith("SyntaxError: ")
        assert [p.name for p in cache.iterdir()] == [sha256(good.read_bytes()).hexdigest()]
    assert (
        _here(bad, tmp_path / "helper")[2]
        == _shell(compile_command(PYTHON, str(bad), cache=str(tmp_path / "shell")))[2]
    )
    # each reuses the other's record
    (tmp_path / "helper" / sha256(good.read_bytes()).hexdigest()).unlink()
    assert _here(good, tmp_path / "shell")[1].startswith(b"deploy-compile: reused ")
    with pytest.raises(ValueError):
        compile_here({"python": "/bin/sh", "path": str(good), "cache": str(tmp_path)}, sha256)


def test_the_helpers_constants_are_the_checks() -> None:
    from deploy.checks import compile as check

    assert fileagent_compiled.MARKER == check.CACHED
    assert (fileagent_compiled.KEEP, fileagent_compiled.DAYS) == (
        check.CACHE_KEEP,
        check.CACHE_DAYS,
    )
    assert fileagent_compiled.STATIC_SIZE == check._STATIC_SIZE
