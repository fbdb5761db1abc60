"""What the interpreter's owner gets when deploy runs their interpreter as them.

A compile check whose interpreter another user (``ml``, a real user made with useradd:
`tests.faults.attacker`) can change runs that interpreter as them (`deploy.checks.compile`,
`deploy.checks.interpreter.RUN_AS`). Their code runs then, by design; it must get the bytes to
compile and nothing of root's: not root's environment (an ``HF_TOKEN`` in root's ``.bashrc``),
and not the files root opened for the command's answer (``state_dir/.session.N.out``/``.err``
in the lock's loop, ``deploy/hostsh/loop.sh``), where a process the owner leaves behind
could write after the command ended — into the next answer's frame. The command runs here as
the loop runs it, as root, in bash and dash, with its output in root's files.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from deploy.checks.compile import compile_command, compile_stdin_command
from deploy.checks.interpreter import AS_OWNER
from tests.faults.attacker import ATTACKER_PYTHON, Attacker
from tests.integration import test_interpreter_owner as owner

#: The real user and their directory (`tests.integration.test_interpreter_owner`).
user = owner.user
home = owner.home

SECRET = "hunter2-root-only"

#: The owner's interpreter: records its environment, leaves a process behind that writes to
#: the stdout and stderr it was given once the check is over, then runs the real python3.
_WRAPPER = """#!/bin/sh
env > {home}/env
{linger}exec {python} "$@"
"""
_LINGER = "( sleep 0.5; echo INJECTED-OUT; echo INJECTED-ERR >&2 ) &\n"


def _wrapper(attacker: Attacker, theirs: Path, *, linger: bool = True) -> Path:
    python = theirs / "python"
    script = _WRAPPER.format(home=theirs, python=ATTACKER_PYTHON, linger=_LINGER * linger)
    subprocess.run(
        attacker.argv("sh", "-c", 'cat > "$1" && chmod 755 "$1"', "-", str(python)),
        input=script.encode(),
        check=True,
        timeout=60,
    )
    return python


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize("form", ["stdin", "cached"])
def test_the_owner_gets_neither_roots_environment_nor_its_answer_files(
    user: Attacker,
    home: Path,
    tmp_path: Path,
    shell: str,
    form: str,
) -> None:
    python = _wrapper(user, home)
    source = tmp_path / "model.py"
    source.write_text("class A:\n    pass\n")
    if form == "stdin":
        command, stdin = compile_stdin_command(str(python), str(source)), source.read_bytes()
    else:
        cache = tmp_path / "compiled"
        command, stdin = compile_command(str(python), str(source), cache=str(cache)), b""
    out, err = tmp_path / ".session.1.out", tmp_path / ".session.1.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        done = subprocess.run(
            [shell, "-c", command],
            input=stdin,
            stdout=stdout,
            stderr=stderr,
            env={"PATH": "/usr/bin:/bin", "HOME": "/root", "HF_TOKEN": SECRET},
            cwd=tmp_path,
            timeout=60,
        )
    sizes = out.stat().st_size, err.stat().st_size
    assert done.returncode == 0, err.read_text()
    assert out.read_text().startswith(f"{AS_OWNER}{user.name} (uid {user.uid}), not root: ")

    env = (home / "env").read_text()
    assert SECRET not in env, "root's environment reached the owner's process"

    time.sleep(1.0)  # the owner's process left behind writes at 0.5 s
    assert (out.stat().st_size, err.stat().st_size) == sizes, (
        "the owner wrote into root's answer files after the check ended: "
        f"{out.read_text()!r} {err.read_text()!r}"
    )


def test_the_module_lookup_run_as_the_owner_gets_only_what_decides_imports(
    user: Attacker, home: Path
) -> None:
    """The restart's module lookup with no server running (`deploy.hostpy.agent._probe_imports`:
    the agent's own environment, root's, plus the service's declared one) on an interpreter
    the user owns runs as them: it must not hand them root's tokens, only what decides where
    Python imports from (its answer is still right)."""
    from deploy.hostpy.agent_proc import resolve_imports

    python = _wrapper(user, home, linger=False)
    model = owner._model(user, home)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "PYTHONPATH": str(home / "src"),
        "HF_TOKEN": SECRET,
    }
    (entry,) = resolve_imports(  # type: ignore[no-untyped-call]
        {"sglang.srt.models.kimi_k25": str(model)}, str(python), env, "/"
    )
    assert entry["ran_as"].startswith(f"as {user.name} (uid {user.uid}), not root: ")
    assert entry["ok"], entry
    seen = (home / "env").read_text()
    assert f"PYTHONPATH={home / 'src'}" in seen
    assert SECRET not in seen, "root's environment reached the owner's process"


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize("cached", [False, True])
def test_the_owner_never_gets_a_file_root_opened_through_their_symlink(
    user: Attacker, home: Path, tmp_path: Path, shell: str, cached: bool
) -> None:
    """The file to compile lives in the interpreter owner's directory (their venv's
    site-packages: where ``sglang`` is when the venv is theirs). Root opens it for the owner's
    process; between the helper's read (which never follows a symlink) and the check, they
    make it a symlink to a file only root may read. Root followed it: its bytes went to their
    process."""
    secret = tmp_path / "secret"
    secret.write_text("root-only-secret\n")
    secret.chmod(0o600)
    python = home / "python"
    script = f'#!/bin/sh\ncat > {home}/stdin\nexec {ATTACKER_PYTHON} "$@" < {home}/stdin\n'
    subprocess.run(
        user.argv("sh", "-c", 'cat > "$1" && chmod 755 "$1"', "-", str(python)),
        input=script.encode(),
        check=True,
        timeout=60,
    )
    model = home / "kimi_k25.py"
    subprocess.run(user.argv("ln", "-s", str(secret), str(model)), check=True, timeout=60)
    cache = str(tmp_path / "compiled") if cached else None
    done = subprocess.run(
        [shell, "-c", compile_command(str(python), str(model), cache=cache)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
        cwd=tmp_path,
        timeout=60,
    )
    got = (home / "stdin").read_text() if (home / "stdin").exists() else ""
    assert "root-only-secret" not in got, "root opened the owner's symlink for them"
    assert done.returncode != 0, "a file swapped for a symlink does not pass"
    assert "deploy: " in done.stderr.strip().splitlines()[-1], done.stderr


def test_the_module_lookup_run_as_the_owner_enters_its_cwd_as_them(
    user: Attacker, home: Path, tmp_path: Path
) -> None:
    """The service's cwd, ``/root/sglang``-like: readable itself, under a directory only root
    may enter. The lookup run as the interpreter's owner was given that cwd by root (chdir,
    then the switch), so their process read files there that they cannot reach. Now it
    enters the cwd as them, and cannot: the lookup fails, saying so."""
    from deploy.hostpy.agent_proc import resolve_imports

    private = tmp_path / "root-only"
    (private / "sglang").mkdir(parents=True)
    private.chmod(0o700)
    (private / "sglang").chmod(0o755)
    (private / "sglang" / "secret.txt").write_text("root-only-secret\n")
    python = home / "python"
    script = f'#!/bin/sh\ncat secret.txt > {home}/leak 2>/dev/null\nexec {ATTACKER_PYTHON} "$@"\n'
    subprocess.run(
        user.argv("sh", "-c", 'cat > "$1" && chmod 755 "$1"', "-", str(python)),
        input=script.encode(),
        check=True,
        timeout=60,
    )
    model = owner._model(user, home)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(home / "src")}
    (entry,) = resolve_imports(  # type: ignore[no-untyped-call]
        {"sglang.srt.models.kimi_k25": str(model)}, str(python), env, str(private / "sglang")
    )
    leak = home / "leak"
    assert not (leak.exists() and "root-only-secret" in leak.read_text()), "read as root's cwd"
    assert not entry["ok"] and entry["error"], entry
