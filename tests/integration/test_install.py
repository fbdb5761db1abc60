"""A built wheel, installed into a fresh venv, runs from any directory (issue 15 item 6).

The product files are copied out of the repository first, so the build neither writes
``build/`` into the checkout nor picks up a stale one. The venv has no site packages of its
own besides the wheel: its dependencies come from the interpreter running the tests, listed
in a ``.pth`` file (a path line: the editable install's hooks there are not run), so nothing is
downloaded, except the build backend (from PyPI) when the interpreter's setuptools is older
than 70.1 (the test extra requires a newer one).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy import hostsh
from tests.integration.conftest import REPO, Deploy, KimiHost

pytestmark = pytest.mark.ssh

#: Development tooling kept out of the wheel (issue 16 item 5): doc generators and the
#: reliability report (tools/), the fault tests' cut proxy (tests/support/).
TOOLING = ("tools", "tests/support")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_CACHE_DIR"] = str(REPO / "tests/.cache/pip")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("PIP_BREAK_SYSTEM_PACKAGES", None)
    return env


def _build_wheel(tmp_path: Path, env: dict[str, str]) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "tests/__init__.py"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    for package in ("deploy", *TOOLING):  # the tooling too: the package list must leave it out
        shutil.copytree(
            REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    out = tmp_path / "wheels"
    # The test extra brings a setuptools that builds wheels by itself: then nothing is fetched.
    no_isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            *no_isolation,
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        env=env,
        timeout=240,
    )
    (wheel,) = out.glob("deploy-*.whl")
    return wheel


def _setuptools_builds_wheels() -> bool:
    """setuptools 70.1+ has ``bdist_wheel`` itself; older ones need the ``wheel`` package."""
    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(part) for part in setuptools.__version__.split(".")[:2])
    return version >= (70, 1)


def _venv_with(wheel: Path, tmp_path: Path, env: dict[str, str]) -> Path:
    """A fresh venv holding the wheel; this interpreter's pip installs it (``--python``),
    which saves the ~30 s ``ensurepip`` takes on a loaded machine."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = [*site.getsitepackages(), site.getusersitepackages()]
    Path(purelib, "test-deps.pth").write_text("\n".join(deps) + "\n")
    install = ["install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *install],
        check=True,
        env=env,
        timeout=120,
    )
    return venv


def test_wheel_runs_check_from_any_directory(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    _, deploy = make_kimi_hosts(["0.5.9"])
    env = _env(tmp_path)
    wheel = _build_wheel(tmp_path, env)
    names = zipfile.ZipFile(wheel).namelist()
    # The host programs `deploy.hostpy.program` assembles from their sources, and the gate's.
    assert {f"deploy/hostpy/{n}.py" for n in ("agent", "fileagent")} <= set(names)
    assert "deploy/services/loadgen.py" in names
    # The shell programs the host runs (`deploy.hostsh`): the lock, status and check scripts.
    host_shell = {f"deploy/hostsh/{p.name}" for p in hostsh.DIRECTORY.glob("*.sh")}
    assert len(host_shell) > 10 and host_shell <= set(names)
    assert "deploy/demo.py" in names and "deploy/sandbox/sshd.py" in names  # `deploy demo`'s
    shipped = [n for n in names if n.startswith(("tools/", "tests/"))]
    shipped += [n for n in names if "docgen" in n or n.endswith(("/reliability.py", "/proxy.py"))]
    assert not shipped, f"development tooling in the wheel: {shipped}"
    venv = _venv_with(wheel, tmp_path, env)
    elsewhere = tmp_path / "elsewhere"  # no playbooks/ here: they come from the package
    elsewhere.mkdir()

    where = subprocess.run(
        [str(venv / "bin/python"), "-c", "import deploy; print(deploy.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), f"the wheel's copy is imported, not {where}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin/deploy"), *args, "-i", str(deploy.inventory)],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    plan = run("apply", "kimi-eagle3", "--check", "--skip-tags", "service")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "1 host(s) would change; nothing was changed" in plan.stdout
    assert "set_eagle3_layers_to_capture" in plan.stdout  # the plan's diff
    drift = run("apply", "kimi-eagle3", "-C", "--skip-tags", "service", "--detailed-exitcode")
    assert drift.returncode == 5, drift.stdout + drift.stderr
    listing = run("apply", "kimi-eagle3", "--list-tasks")
    assert listing.returncode == 0 and "Add the EAGLE-3 methods" in listing.stdout
