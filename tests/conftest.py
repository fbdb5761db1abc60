"""Fixtures every test shares: a hermetic environment and real sshd hosts on loopback.

The environment is isolated so that a developer's ``~/.ssh/config``, known_hosts, agent,
``DEPLOY_INVENTORY`` or run history can never change what a test sees or touch the real
files. The one thing kept is the sglang wheel cache: downloading 40 MB per test would be
absurd, so its real location is taken before ``HOME`` moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.sandbox.sshd import SshdSandbox, SshHost
from deploy.sandbox.sshd_setup import SandboxError, find_sshd
from deploy.sandbox.wheels import ALREADY_PATCHED, PATCH_NEEDED, cache_dir, sglang_wheel

#: Computed at import, while HOME and XDG_CACHE_HOME are still the developer's.
WHEEL_CACHE = str(cache_dir())
SSH_FIXTURES = {"sshd_sandbox", "ssh_host"}


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME (its own XDG dirs, no agent) for each test; returns it."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local/state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("DEPLOY_WHEEL_CACHE", WHEEL_CACHE)
    # COLUMNS and LINES: a developer's shell may export them, and pytest-xdist's workers have
    # them (80x24); either would make deploy fit its tables to a width the test never chose.
    for name in ("SSH_AUTH_SOCK", "SSH_AGENT_PID", "DEPLOY_INVENTORY", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    return home


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist declares this mark too; declared here as well so that a run without the
    # plugin (``-p no:xdist``) does not turn the unknown mark into an error (filterwarnings).
    config.addinivalue_line(
        "markers", "xdist_group(name): run on one pytest-xdist worker, one test after another"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist, fetch the SGLang wheels once, before any worker starts.

    Workers would otherwise all find the cache empty on a fresh machine and run ``pip
    download`` into the same directory at once, one reading a wheel another is still writing.
    A failed download is left for the tests that need the wheel to report.
    """
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", default=None):
        return
    for version in (PATCH_NEEDED, ALREADY_PATCHED):
        try:
            sglang_wheel(version)
        except RuntimeError:
            return


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses real sshd, so ``-m 'not ssh'`` selects the fast ones."""
    for item in items:
        if SSH_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ssh)


@pytest.fixture
def sshd_sandbox(tmp_path: Path) -> Iterator[SshdSandbox]:
    """A sandbox under ``tmp_path/sandbox``; every daemon is stopped after the test.

    A missing sshd fails the test (never a silent skip: CI installs it).
    """
    try:
        find_sshd()
    except SandboxError as exc:
        pytest.fail(f"{exc} (CI does this in .ci/run)", pytrace=False)
    with SshdSandbox(tmp_path / "sandbox") as sandbox:
        yield sandbox


@pytest.fixture
def ssh_host(sshd_sandbox: SshdSandbox) -> SshHost:
    """One running host, ``host1``, in `sshd_sandbox`."""
    return sshd_sandbox.start("host1")
