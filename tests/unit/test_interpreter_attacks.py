"""Attacks on the interpreter trust check (`deploy.checks.interpreter`, and its Python twin
`deploy.hostpy.agent_trust`) that need no second user: the check must judge what CPython
itself reads, in bash and dash. The attacks that need a real user to run the interpreter as:
tests/integration/test_interpreter_attacks.py.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.checks.compile import compile_command
from deploy.checks.interpreter import root_only_if_trusted
from deploy.hostpy.agent_trust import lookup_paths  # type: ignore[attr-defined]
from tests.unit.test_interpreter_trust import OTHER, SHELLS, _judge

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

#: A real CPython, whose getpath decides what a venv's ``home`` means.
BASE = os.path.realpath(sys.executable)


def _stdlib_prefix(root: Path) -> Path:
    """``root/bin`` and ``root/lib/python3.X`` holding this Python's own stdlib landmark and
    ``encodings``: CPython takes ``root`` as its prefix when a venv's ``home`` is ``root/bin``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(os.__file__).parent
    (root / "bin").mkdir(parents=True)
    (root / "lib" / version).mkdir(parents=True)
    shutil.copy(stdlib / "os.py", root / "lib" / version / "os.py")
    shutil.copytree(stdlib / "encodings", root / "lib" / version / "encodings")
    return root / "lib" / version


def _encodings_of(python: Path) -> str:
    """Where ``python -I -S`` really loads ``encodings`` from: what CPython itself decides."""
    return subprocess.run(
        [str(python), "-I", "-S", "-c", "import encodings; print(encodings.__file__)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_pyvenv_cfg_with_two_homes_is_judged_by_the_one_cpython_uses(
    tmp_path: Path, shell: str
) -> None:
    """Root's venv (``--copies``) whose ``pyvenv.cfg`` names two homes: another user's prefix
    first, the system's last. CPython's getpath stops at the first ``home`` (its encodings
    come from there), so the other user's prefix decides: the check must say untrusted. It
    judged the last one and trusted it."""
    theirs = tmp_path / "theirs"
    stdlib = _stdlib_prefix(theirs)
    for path in [theirs, *theirs.rglob("*")]:
        os.lchown(path, OTHER, OTHER)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    shutil.copy(BASE, python)
    (venv / "pyvenv.cfg").write_text(f"home = {theirs / 'bin'}\nhome = {Path(BASE).parent}\n")

    loaded = _encodings_of(python)
    assert loaded == str(stdlib / "encodings" / "__init__.py"), "CPython uses the first home"

    verdict = _judge(shell, python)
    assert f"(uid {OTHER})" in verdict["reason"], verdict
    assert verdict["uid"] == str(OTHER)
    paths, reason = lookup_paths(str(python), {}, "/")
    assert reason is None
    assert str(theirs / "bin") in paths, "the lookup judges the first home too"


def _swapped_after_the_check(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """Root's venv ``ml/venv`` (its ``bin/python`` a root symlink to a real CPython), reached
    through root's symlink ``opt/sglang``, in a directory another user owns (``ml``): the check
    trusts ``opt/sglang/bin/python`` (every path it judges is root's). The user then renames
    their own venv into its place, right after the check's ``stat`` — the race they would run
    in a loop, won here every time by a ``stat`` on PATH that makes the swap once it has
    answered. Returns the interpreter as given, the file the user's interpreter writes its uid
    to when it starts, and the environment to run in."""
    theirs = tmp_path / "ml"
    (theirs / "venv" / "bin").mkdir(parents=True)
    (theirs / "venv" / "bin" / "python").symlink_to(BASE)
    marker = tmp_path / "started-as"
    (theirs / "evil" / "bin").mkdir(parents=True)
    evil = theirs / "evil" / "bin" / "python"
    evil.write_text(f'#!/bin/sh\nid -u >> {marker}\nexec {BASE} "$@"\n')
    evil.chmod(0o755)
    for path in [theirs / "evil", *(theirs / "evil").rglob("*")]:
        os.lchown(path, OTHER, OTHER)
    os.chown(theirs, OTHER, OTHER)
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "sglang").symlink_to(theirs / "venv")
    shim = tmp_path / "shim"
    shim.mkdir()
    stat = shim / "stat"
    stat.write_text(
        f'#!/bin/sh\n/usr/bin/stat "$@"; _s=$?\nif [ -d {theirs}/evil ]; then\n'
        f"  mv {theirs}/venv {theirs}/old && mv {theirs}/evil {theirs}/venv\nfi\nexit $_s\n"
    )
    stat.chmod(0o755)
    env = {"PATH": f"{shim}:/usr/bin:/bin", "HOME": "/root"}
    return tmp_path / "opt" / "sglang" / "bin" / "python", marker, env


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("form", ["compile", "cached compile", "agent_python"])
def test_root_runs_the_interpreter_it_checked_not_one_swapped_in_after(
    tmp_path: Path, shell: str, form: str
) -> None:
    """The compile check and the process agent (`root_only_if_trusted`) exec the path they
    judged, resolved: a directory swapped after the check, above a symlink's target, cannot put
    another interpreter there. They ran the path as given (or found on PATH again), through
    the swapped directory: the user's interpreter started as root."""
    python, marker, env = _swapped_after_the_check(tmp_path)
    assert _judge(shell, python)["reason"] == "", "trusted at the time of the check"
    assert not (tmp_path / "ml" / "old").exists(), "the judge above ran the real stat"
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    if form == "agent_python":
        agent = f"{shlex.quote(str(python))} -I -S -c 'import sys; print(sys.argv[1])' ok"
        command = root_only_if_trusted(str(python), agent)
    else:
        cache = str(tmp_path / "compiled") if form == "cached compile" else None
        command = compile_command(str(python), str(source), cache=cache)
    done = subprocess.run(
        [shell, "-c", command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert (tmp_path / "ml" / "old").exists(), "the swap happened, after the check's stat"
    assert not marker.exists(), f"root started the swapped-in interpreter: {marker.read_text()}"
    assert done.returncode == 0, done.stderr


def test_the_lookup_judges_every_directory_its_interpreter_is_reached_through(
    tmp_path: Path,
) -> None:
    """The module lookup (`deploy.hostpy.agent_trust`) starts the server's interpreter as
    given (its venv must count), so it must judge every directory resolving that path enters:
    the user's directory above the venv root's symlink points into is theirs to swap. It
    judged the path as given and as resolved, and trusted it."""
    from deploy.hostpy.agent_trust import judge  # type: ignore[attr-defined]

    python, _, _ = _swapped_after_the_check(tmp_path)
    paths, reason = lookup_paths(str(python), {}, "/")
    assert reason is None
    why, owner = judge(paths, 0)
    assert why == f"{tmp_path / 'ml'} is owned by UNKNOWN (uid {OTHER})", why
    assert owner == OTHER


def test_the_lookup_judges_a_relative_pythonpath_entry_in_its_cwd(tmp_path: Path) -> None:
    """``PYTHONPATH=src`` (or an empty entry: the cwd) is found from the cwd: the lookup must
    judge ``cwd/src``, a directory another user owns in root's cwd. It judged only absolute
    entries."""
    from deploy.hostpy.agent_trust import judge

    (tmp_path / "src").mkdir()
    os.chown(tmp_path / "src", OTHER, OTHER)
    paths, reason = lookup_paths(BASE, {"PYTHONPATH": "src"}, str(tmp_path))
    assert reason is None
    why, owner = judge(paths, 0)
    assert why == f"{tmp_path / 'src'} is owned by UNKNOWN (uid {OTHER})", why
    assert owner == OTHER


@pytest.mark.parametrize("variable", ["LD_LIBRARY_PATH", "LD_PRELOAD"])
def test_the_lookup_judges_what_the_dynamic_linker_loads_from(
    tmp_path: Path, variable: str
) -> None:
    """The lookup runs with the server's (or the service's declared) environment: the dynamic
    linker loads ``libc.so.6`` itself from an ``LD_LIBRARY_PATH`` directory, and any
    ``LD_PRELOAD`` object, before Python starts. One another user owns must not be loaded as
    root. Neither was judged."""
    from deploy.hostpy.agent_trust import judge

    theirs = tmp_path / "cuda" / "lib64"
    theirs.mkdir(parents=True)
    os.chown(theirs, OTHER, OTHER)
    value = str(theirs) if variable == "LD_LIBRARY_PATH" else f"{theirs}/libfast.so"
    paths, reason = lookup_paths(BASE, {variable: f"/usr/lib:{value}"}, "/")
    assert reason is None
    why, owner = judge(paths, 0)
    assert why == f"{theirs} is owned by UNKNOWN (uid {OTHER})", why
    assert owner == OTHER


@pytest.mark.parametrize("shell", SHELLS)
def test_a_pth_file_beside_the_interpreter_is_not_trusted(tmp_path: Path, shell: str) -> None:
    """``python._pth`` beside an interpreter replaces its whole sys.path, the stdlib included,
    with the directories it lists (CPython 3.11 on Linux too, checked here): one another user
    owns would give them root's start-up, as a ``home`` would. Its lines were not judged."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    shutil.copy(BASE, python)
    theirs = tmp_path / "theirs"
    stdlib = _stdlib_prefix(theirs)
    os.chown(stdlib, OTHER, OTHER)
    (tmp_path / "bin" / "python._pth").write_text(f"{stdlib}\n{Path(os.__file__).parent}\n")
    loaded = _encodings_of(python)
    assert loaded == str(stdlib / "encodings" / "__init__.py"), "CPython reads python._pth"
    assert "python._pth replaces sys.path" in _judge(shell, python)["reason"]
    assert lookup_paths(str(python), {}, "/")[1] == f"{python}._pth replaces sys.path (not judged)"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("form", ["compile", "cached compile", "agent_python"])
def test_a_missing_interpreter_made_after_the_check_is_not_run(
    tmp_path: Path, shell: str, form: str
) -> None:
    """The interpreter is missing under a root-owned sticky directory (``/tmp/venv/bin/python``
    on a host without that venv): nothing there to judge, so the check found nothing against
    it, and anyone may create it. The user creates it right after the check's ``stat`` (the
    harness's ``stat`` does): root ran it. Now a path that was not there when judged is not
    found (127), as it was then."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    python = sticky / "venv" / "bin" / "python"
    marker = tmp_path / "started-as"
    shim = tmp_path / "shim"
    shim.mkdir()
    stat = shim / "stat"
    stat.write_text(
        f'#!/bin/sh\n/usr/bin/stat "$@"; _s=$?\nif [ ! -e {python} ]; then\n'
        f"  mkdir -p {python.parent} && printf '#!/bin/sh\\nid -u >> {marker}\\n' > {python}\n"
        f"  chmod 755 {python}\nfi\nexit $_s\n"
    )
    stat.chmod(0o755)
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    if form == "agent_python":
        command = root_only_if_trusted(str(python), f"{shlex.quote(str(python))} -I -c pass")
    else:
        cache = str(tmp_path / "compiled") if form == "cached compile" else None
        command = compile_command(str(python), str(source), cache=cache)
    done = subprocess.run(
        [shell, "-c", command],
        capture_output=True,
        text=True,
        env={"PATH": f"{shim}:/usr/bin:/bin", "HOME": "/root"},
        cwd=tmp_path,
        timeout=60,
    )
    assert python.exists(), "made after the check's stat"
    assert not marker.exists(), f"root ran what was made after the check: {marker.read_text()}"
    assert done.returncode == 127, done.stderr
