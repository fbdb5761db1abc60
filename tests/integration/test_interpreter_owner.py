"""An interpreter another user can change is never run as root by deploy, and still checks.

The kimi-eagle3 change run over real sshd (as root, as on a GPU host), with the compile check's
interpreter (``sglang_python``) in a directory owned by a real unprivileged user made with
useradd (`tests.faults.attacker`), who planted code that records ``id -u`` whenever that
interpreter starts:

- ``wrapper``: ``bin/python`` replaced by a ``#!/bin/sh`` script (it then runs python3);
- ``venv``: a venv the user made with ``python3 -m venv --copies``, its ``pyvenv.cfg``'s
  ``home`` pointed at the user's own prefix, whose standard library's ``encodings`` (imported
  at start-up even under ``-I -S``) records the uid.

Before this change the file helper ran on the venv's interpreter as root, and the compile
check ran the wrapper as root: the record said ``0``. Now the helper runs on the host's
python3 and the check runs that same interpreter as its owner (``setpriv``), with the bytes
on stdin: the record holds only the owner's uid, it is not empty (the check did use that
interpreter), the run succeeds and its report says whom the check ran as. A directory anyone
may write leaves nobody to run it as: the check is refused in one line, the host rolled back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.attacker import ATTACKER_PYTHON, Attacker
from tests.integration.conftest import Deploy, KimiHost, sha256

APPLY = ("apply", "kimi-eagle3", "--yes", "--json", "--skip-tags", "service")
MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]

#: Appended to the user's copy of ``encodings/__init__.py``: who started this interpreter.
#: (``open`` is not a builtin yet when ``encodings`` is imported: ``os`` calls only.)
_RECORD = (
    "\nimport os as _o\n_d = _o.open({marker!r}, _o.O_WRONLY | _o.O_APPEND)\n"
    "_o.write(_d, b'%d\\n' % _o.getuid())\n_o.close(_d)\n"
)


@pytest.fixture
def user(attacker: Attacker) -> Attacker:
    """The real unprivileged user (`tests.faults.attacker`: skips where it cannot be made)."""
    return attacker


@pytest.fixture
def home(user: Attacker) -> Iterator[Path]:
    """``/tmp/X/ml``: the user's own directory, reachable (not listable) through root's X."""
    arena = Path(tempfile.mkdtemp(prefix="deploy-interp-", dir="/tmp"))
    arena.chmod(0o711)
    theirs = arena / "ml"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, user.uid, user.gid)
    yield theirs
    shutil.rmtree(arena, ignore_errors=True)


def _as(user: Attacker, *argv: str) -> None:
    subprocess.run(user.argv(*argv), check=True, timeout=120, cwd="/", capture_output=True)


def _wrapper(user: Attacker, home: Path, marker: Path) -> Path:
    script = f'#!/bin/sh\nid -u >> {marker}\nexec {ATTACKER_PYTHON} "$@"\n'
    _as(user, "sh", "-c", f"mkdir -p {home}/py/bin && cat > {home}/py/bin/python", "-")
    python = home / "py" / "bin" / "python"
    subprocess.run(
        user.argv("sh", "-c", 'cat > "$1" && chmod 755 "$1"', "-", str(python)),
        input=script.encode(),
        check=True,
        timeout=60,
    )
    return python


def _venv(user: Attacker, home: Path, marker: Path) -> Path:
    """The user's venv whose ``home`` is their own prefix: the system stdlib, linked entry by
    entry, except ``encodings``, copied with `_RECORD` appended."""
    real = Path(os.path.realpath(ATTACKER_PYTHON))
    stdlib = Path(f"/usr/lib/python3.{real.name.rpartition('.')[2]}")
    build = f"""
import os, shutil, subprocess, sys
home, stdlib, marker = sys.argv[1], sys.argv[2], sys.argv[3]
lib = os.path.join(home, "base", "lib", os.path.basename(stdlib))
os.makedirs(os.path.join(home, "base", "bin"))
os.makedirs(lib)
for name in os.listdir(stdlib):
    if name != "encodings":
        os.symlink(os.path.join(stdlib, name), os.path.join(lib, name))
shutil.copytree(os.path.join(stdlib, "encodings"), os.path.join(lib, "encodings"))
with open(os.path.join(lib, "encodings", "__init__.py"), "a") as f:
    f.write({_RECORD!r}.format(marker=marker))
subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--copies",
                os.path.join(home, "venv")], check=True)
cfg = os.path.join(home, "venv", "pyvenv.cfg")
lines = [l for l in open(cfg) if not l.startswith("home")]
with open(cfg, "w") as f:
    f.write("home = " + os.path.join(home, "base", "bin") + "\\n" + "".join(lines))
"""
    _as(user, ATTACKER_PYTHON, "-c", build, str(home), str(stdlib), str(marker))
    return home / "venv" / "bin" / "python3"


def _marker(user: Attacker, home: Path) -> Path:
    marker = home / "started-as"
    _as(user, "touch", str(marker))
    return marker


def _compile_summary(stdout: str) -> str:
    (host,) = json.loads(stdout)["hosts"]
    (step,) = [s for s in host["steps"] if s["kind"] == "verify_python"]
    return str(step["summary"])


@pytest.mark.parametrize("planted", ["wrapper", "venv"])
def test_planted_interpreter_code_never_runs_as_root_and_the_check_still_uses_it(
    make_kimi_hosts: MakeHosts, user: Attacker, home: Path, planted: str
) -> None:
    marker = _marker(user, home)
    python = (_wrapper if planted == "wrapper" else _venv)(user, home, marker)
    marker.write_text("")  # the venv's own making started it (as the user)
    (kimi,), deploy = make_kimi_hosts(["0.5.9"], sglang_python=str(python))

    # --check compiles the planned bytes from stdin: as the owner too
    check = deploy(*APPLY, "--check")
    assert check.exit_code == 0, check.output
    assert marker.read_text().split() == [str(user.uid)], "--check: started once, as its owner"
    marker.write_text("")

    first = deploy(*APPLY)
    assert first.exit_code == 0, first.output
    started = marker.read_text().split()
    assert "0" not in started, f"root started {python}, which {user.name} can change"
    assert started and set(started) == {str(user.uid)}, "the check ran that interpreter"
    assert f"compiled as {user.name} (uid {user.uid}), not root: " in _compile_summary(first.stdout)
    assert "set_eagle3_layers_to_capture" in kimi.model_file.read_text()

    marker.write_text("")
    again = deploy(*APPLY)
    assert again.exit_code == 0, again.output
    assert "0" not in marker.read_text().split()
    # The price, on this path only: the change run keeps its 2 waits after login (the check
    # goes with the commit); the re-run has no record to reuse (none is kept for an
    # interpreter root does not run) and waits for its check: 2, where a trusted one waits 1.
    waits = [json.loads(r.stdout)["hosts"][0]["ops"]["wait"] for r in (first, again)]
    assert waits == [2, 2], waits


def test_an_interpreter_anyone_may_change_is_refused_in_one_line(
    make_kimi_hosts: MakeHosts, user: Attacker, home: Path
) -> None:
    """No single user owns it: nobody to run it as. The check is refused, the host put back."""
    marker = _marker(user, home)
    python = _wrapper(user, home, marker)
    os.chown(home / "py" / "bin", 0, 0)
    (home / "py" / "bin").chmod(0o777)
    (kimi,), deploy = make_kimi_hosts(["0.5.9"], sglang_python=str(python))
    before = sha256(kimi.model_file)

    result = deploy(*APPLY)
    assert result.exit_code == 1, result.output
    assert marker.read_text() == "", "never started"
    summary = _compile_summary(result.stdout)
    assert f"refusing to run {python} as root: {home / 'py' / 'bin'} is writable by group or " in (
        summary
    )
    assert "\n" not in summary
    assert sha256(kimi.model_file) == before


# -- the restart's module lookup (`deploy.hostpy.agent_proc.resolve_imports`, run by the agent
# -- as root on the host; here called as the agent calls it, as root, on this machine) ---------

_SITECUSTOMIZE = (
    "import os\n_d = os.open({marker!r}, os.O_WRONLY | os.O_APPEND)\n"
    "os.write(_d, b'%d\\n' % os.getuid())\nos.close(_d)\n"
)


def _model(user: Attacker, home: Path) -> Path:
    """``home/src/sglang/srt/models/kimi_k25.py``, a namespace package tree the user made."""
    _as(user, "mkdir", "-p", f"{home}/src/sglang/srt/models")
    _as(user, "touch", f"{home}/src/sglang/srt/models/kimi_k25.py")
    return home / "src" / "sglang" / "srt" / "models" / "kimi_k25.py"


def test_the_module_lookup_runs_another_users_interpreter_as_that_user(
    user: Attacker, home: Path
) -> None:
    """The service's python (no server running) is the user's wrapper: looked up as them, and
    the answer is still the file that interpreter loads."""
    from deploy.hostpy.agent_proc import resolve_imports

    marker = _marker(user, home)
    python = _wrapper(user, home, marker)
    model = _model(user, home)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(home / "src")}
    (entry,) = resolve_imports(  # type: ignore[no-untyped-call]
        {"sglang.srt.models.kimi_k25": str(model)}, str(python), env, "/"
    )
    assert marker.read_text().split() == [str(user.uid)], "started once, as its owner"
    assert entry["ok"], entry
    assert entry["ran_as"].startswith(f"as {user.name} (uid {user.uid}), not root: ")


def test_the_module_lookup_for_a_server_another_user_runs_runs_as_that_user(
    user: Attacker, home: Path
) -> None:
    """A server running as the user, with their PYTHONPATH (a sitecustomize.py there runs at
    every start-up): the lookup with that environment runs as them, not as root."""
    from deploy.hostpy.agent_proc import resolve_imports

    marker = _marker(user, home)
    model = _model(user, home)
    _as(
        user,
        "sh",
        "-c",
        f"printf '%s' \"$1\" > {home}/src/sitecustomize.py",
        "-",
        _SITECUSTOMIZE.format(marker=str(marker)),
    )
    server = subprocess.Popen(user.argv("sleep", "60"))
    try:
        while f"\t{user.uid}\t" not in Path(f"/proc/{server.pid}/status").read_text():
            time.sleep(0.01)  # until setpriv has switched to the user
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(home / "src")}
        (entry,) = resolve_imports(  # type: ignore[no-untyped-call]
            {"sglang.srt.models.kimi_k25": str(model)}, ATTACKER_PYTHON, env, "/", server.pid
        )
    finally:
        server.kill()
        server.wait()
    assert marker.read_text().split() == [str(user.uid)]
    assert entry["ok"], entry
    assert entry["ran_as"] == f"as {user.name} (uid {user.uid}), the user pid {server.pid} runs as"
