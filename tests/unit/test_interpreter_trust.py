"""The host's trust check of an interpreter before root runs it (`deploy.checks.interpreter`),
in a local bash and dash: the rule's own text.

Other users' files are made with ``chown`` to a uid nobody has (no user is needed to own a
file), so these need root; they skip elsewhere. Running the interpreter as its owner needs a
real user: tests/integration/test_interpreter_owner.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.checks.interpreter import REFUSED, ran_as, root_only_if_trusted

OTHER = 4321
PYTHON = os.path.realpath(sys.executable)
SHELLS = ["bash", "sh"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _judge(shell: str, python: Path | str) -> dict[str, str]:
    """`CHECK` of ``python`` in ``shell``: its verdict variables."""
    script = (
        f"_tP='{python}'\n"
        + hostsh.text("check.sh")
        + 'printf "%s\\n%s\\n%s\\n" "$_tX" "$_tU" "$_tN"\n'
    )
    done = subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    reason, uid, name = done.stdout.split("\n")[:3]
    return {"reason": reason, "uid": uid, "name": name}


def _interpreter(root: Path) -> Path:
    """``root/bin/python``: a root-owned executable with a stdlib-like ``lib/python3.11``."""
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "python3.11" / "encodings").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return python


@pytest.mark.parametrize("shell", SHELLS)
def test_a_root_owned_interpreter_is_trusted(tmp_path: Path, shell: str) -> None:
    assert _judge(shell, _interpreter(tmp_path / "py"))["reason"] == ""
    assert _judge(shell, PYTHON)["reason"] == ""


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "part", ["bin/python", "bin", ".", "lib", "lib/python3.11", "lib/python3.11/encodings"]
)
def test_a_part_another_user_owns_makes_it_untrusted_and_names_them(
    tmp_path: Path, shell: str, part: str
) -> None:
    python = _interpreter(tmp_path / "py")
    os.chown(tmp_path / "py" / part, OTHER, OTHER)
    verdict = _judge(shell, python)
    assert f"(uid {OTHER})" in verdict["reason"]
    assert str((tmp_path / "py" / part).resolve()).removesuffix("/.") in verdict["reason"]
    assert verdict["uid"] == str(OTHER)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_directory_others_may_write_leaves_nobody_to_run_it_as(
    tmp_path: Path, shell: str
) -> None:
    python = _interpreter(tmp_path / "py")
    (tmp_path / "py" / "bin").chmod(0o777)
    verdict = _judge(shell, python)
    assert "is writable by group or others (mode 777" in verdict["reason"]
    assert verdict["uid"] == "-"


@pytest.mark.parametrize("shell", SHELLS)
def test_two_other_owners_leave_nobody_to_run_it_as(tmp_path: Path, shell: str) -> None:
    python = _interpreter(tmp_path / "py")
    os.chown(python, OTHER, OTHER)
    os.chown(tmp_path / "py" / "lib", OTHER + 1, OTHER + 1)
    assert _judge(shell, python)["uid"] == "-"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_resolved_path_is_judged_too(tmp_path: Path, shell: str) -> None:
    """A root-owned symlink to another user's interpreter: its target decides."""
    theirs = _interpreter(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", OTHER, OTHER)
    (tmp_path / "bin").mkdir()
    link = tmp_path / "bin" / "python"
    link.symlink_to(theirs)
    verdict = _judge(shell, link)
    assert verdict["reason"] == f"{tmp_path / 'theirs'} is owned by UNKNOWN (uid {OTHER})"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "line", ["home = {home}", "  Home=\t{home}\r", "home={home}\nhome = /usr/bin"]
)
def test_a_venv_is_judged_by_the_home_its_pyvenv_cfg_names(
    tmp_path: Path, shell: str, line: str
) -> None:
    """A root-owned venv whose pyvenv.cfg (as Python reads it: key case and spaces
    ignored, the first ``home`` wins: tests/unit/test_interpreter_attacks.py) points the
    stdlib at another user's prefix."""
    venv = _interpreter(tmp_path / "venv")
    base = _interpreter(tmp_path / "base")
    os.chown(tmp_path / "base" / "lib" / "python3.11", OTHER, OTHER)
    cfg = tmp_path / "venv" / "pyvenv.cfg"
    cfg.write_text(line.format(home=tmp_path / "base" / "bin") + "\n", newline="")
    verdict = _judge(shell, venv)
    assert verdict["reason"] == (
        f"{tmp_path / 'base' / 'lib' / 'python3.11'} is owned by UNKNOWN (uid {OTHER})"
    )
    cfg.write_text("home = /usr/bin\n")
    assert _judge(shell, venv)["reason"] == "", "a root-owned base is trusted"
    os.chown(cfg, OTHER, OTHER)
    assert f"{cfg} is owned by" in _judge(shell, venv)["reason"]
    assert base.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_relative_home_is_not_trusted(tmp_path: Path, shell: str) -> None:
    venv = _interpreter(tmp_path / "venv")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = bin\n")
    assert "names no absolute home (bin)" in _judge(shell, venv)["reason"]


def test_ran_as_reads_the_line_run_as_prints() -> None:
    line = "deploy-interpreter: as ml (uid 1001), not root: /opt/v is owned by ml (uid 1001)"
    assert ran_as(f"x\n{line}\n") == line.removeprefix("deploy-interpreter: ")
    assert ran_as("abc\n") is None


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("tools", ["all", "none"])
def test_with_no_way_to_run_it_as_its_owner_root_refuses_in_one_line(
    tmp_path: Path, shell: str, tools: str
) -> None:
    """uid 4321 is no user (``id -g`` fails, ``runuser`` needs a name); without setpriv and
    runuser nobody can be switched to either: one line, exit 77, the interpreter never run."""
    python = _interpreter(tmp_path / "py")
    ran = tmp_path / "ran"
    python.write_text(f"#!/bin/sh\ntouch {ran}\n")
    os.chown(python, OTHER, OTHER)
    path = os.environ["PATH"]
    if tools == "none":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("realpath", "stat", "id", "printf"):
            found = shutil.which(tool)
            assert found
            (bin_dir / tool).symlink_to(found)
        path = str(bin_dir)
    script = (
        f"_tP='{python}'\n"
        + hostsh.text("check.sh")
        + hostsh.text("run_as.sh")
        + 'exec $_tS "$_tP"\n'
    )
    done = subprocess.run(
        [shutil.which(shell) or shell, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": path},
    )
    assert done.returncode == REFUSED, (done.stdout, done.stderr)
    assert done.stderr == (
        f"deploy: refusing to run {python} as root: {python} is owned by UNKNOWN (uid {OTHER}); "
        f"neither setpriv nor runuser can run it as UNKNOWN (uid {OTHER})\n"
    )
    assert not ran.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_the_process_agent_runs_only_on_a_trusted_interpreter(tmp_path: Path, shell: str) -> None:
    """``agent_python`` must run as root (it stops and starts servers): not switched to its
    owner but refused in one line; trusted, it runs as before; ``python3`` is not checked."""
    python = _interpreter(tmp_path / "py")
    ran = tmp_path / "ran"
    python.write_text(f'#!/bin/sh\necho "$@" > {ran}\n')
    command = root_only_if_trusted(str(python), f"{python} -c AGENT probe")
    done = subprocess.run([shell, "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and ran.read_text() == "-c AGENT probe\n", done.stderr
    ran.unlink()
    os.chown(tmp_path / "py", OTHER, OTHER)
    done = subprocess.run([shell, "-c", command], capture_output=True, text=True, timeout=30)
    assert done.returncode == REFUSED and not ran.exists()
    assert done.stderr == (
        f"deploy: refusing to run {python} as root: {tmp_path / 'py'} is owned by UNKNOWN "
        f"(uid {OTHER})\n"
    )
    assert root_only_if_trusted("python3", "python3 -c X") == "python3 -c X"
