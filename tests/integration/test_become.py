"""become over real sshd, real non-root users and real sudo: NOPASSWD, a password, refusals.

The sandbox host's target file and state_dir belong to root (as /root/sglang and
/var/lib/deploy do on a GPU host); the run logs in as an ordinary user made with useradd:

- without become the run stops at the first thing the user may not do, in one line
  ("permission denied as USER on gpu-1: PATH; use become"), exit 4, and touches nothing;
- with become and a NOPASSWD rule everything (lock, journal, backups, the write, rollback)
  happens as root, and the file keeps its owner and mode;
- with a password (become_password_env) the password reaches sudo and nowhere else: not the
  output, not the log file, not the host's process list;
- a refused sudo (wrong password, no sudoers rule, a password needed but none given) is one
  clear line, exit 4, and nothing on the host is touched.

We run as root in CI; the users and their sudoers rules are removed after the module.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from deploy.sandbox.ports import free_port
from deploy.sandbox.sshd import SshdSandbox, SshHost
from tests.integration.conftest import Deploy
from tests.integration.terminal import on_terminal

PASSWORD = "c0rrect-" + secrets.token_hex(4)
ORIGINAL = b"port=30000\n"
PLAYBOOK = """\
name: conf
hosts: all
steps:
  - name: Turn the feature on
    append:
      path: "{{ root }}/srv/app.conf"
      text: "feature=on\\n"
"""


@dataclass
class Fleet:
    host: SshHost
    base: Path
    users: dict[str, str]  # role -> user name
    target: Path

    def deploy(self, tmp: Path, role: str, **host: object) -> Deploy:
        """A workstation directory whose inventory logs in as the ``role`` user."""
        entry = self.host.inventory_entry()
        entry.update(user=self.users[role], **host)
        (tmp / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {self.host.name: entry}}))
        (tmp / "conf.yaml").write_text(PLAYBOOK)
        return Deploy(tmp, tmp / "hosts.yaml")

    def untouched(self) -> bool:
        info = self.target.stat()
        return (
            self.target.read_bytes() == ORIGINAL
            and (info.st_uid, info.st_mode & 0o7777) == (0, 0o600)
            and not self.host.state_dir.exists()
        )

    def reset(self) -> None:
        if self.host.state_dir.exists():
            shutil.rmtree(self.host.state_dir)
        self.target.write_bytes(ORIGINAL)
        os.chown(self.target, 0, 0)
        self.target.chmod(0o600)


def _run(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, check=True, input=stdin, text=True, capture_output=True)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0 or not shutil.which("sudo") or not shutil.which("useradd"):
        pytest.fail("needs root, useradd and sudo (.ci/run installs sudo)", pytrace=False)
    # Outside pytest's 0700 tmp: sshd reads authorized_keys as the logging-in user.
    base = Path(tempfile.mkdtemp(prefix="deploy-become-"))
    base.chmod(0o755)
    suffix = secrets.token_hex(3)
    users = {role: f"dpl{role}{suffix}" for role in ("nopw", "pw", "none")}
    rules = Path(f"/etc/sudoers.d/deploy-test-{suffix}")
    sandbox = SshdSandbox(base / "sandbox")
    try:
        for role, user in users.items():
            home = base / f"home-{user}"
            _run("useradd", "-M", "-d", str(home), "-s", "/bin/sh", user)
            home.mkdir()
            shutil.chown(home, user, user)
            # A locked account ("!") may not log in at all, even with a key.
            _run("chpasswd", stdin=f"{user}:{PASSWORD if role == 'pw' else secrets.token_hex(8)}\n")
        rules.write_text(f"{users['nopw']} ALL=(ALL) NOPASSWD: ALL\n{users['pw']} ALL=(ALL) ALL\n")
        rules.chmod(0o440)
        host = sandbox.start("gpu-1")
        for path in (base / "sandbox", host.workdir, host.root):
            path.chmod(0o755)
        (host.workdir / "authorized_keys").chmod(0o644)
        srv = host.root / "srv"
        srv.mkdir(mode=0o700)
        target = srv / "app.conf"
        fleet = Fleet(host, base, users, target)
        fleet.reset()
        yield fleet
    finally:
        sandbox.close()
        rules.unlink(missing_ok=True)
        for user in users.values():
            subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def clean(fleet: Fleet) -> Fleet:
    fleet.reset()
    return fleet


def test_without_become_a_permission_problem_is_one_line_and_nothing_is_touched(
    clean: Fleet, tmp_path: Path
) -> None:
    user = clean.users["nopw"]
    deploy = clean.deploy(tmp_path, "nopw")
    run = deploy("apply", "conf.yaml", "--yes")
    assert run.exit_code == 4, run.output
    line = f"permission denied as {user} on gpu-1: {clean.host.state_dir}/runs; use become"
    assert line in run.output
    assert "rolled back" not in run.output and "Traceback" not in run.output
    assert clean.untouched()

    # --check takes no lock, but says what the run would meet, with the same line and code.
    check = deploy("apply", "conf.yaml", "--check")
    assert check.exit_code == 4, check.output
    assert line in check.output and "would change" not in check.output
    assert clean.untouched()

    # With a state_dir of its own, the next wall is the root-only file: nothing was changed.
    own = clean.base / f"home-{user}" / "state"
    deploy = clean.deploy(tmp_path, "nopw", state_dir=str(own))
    for args in (["--check"], ["--yes"]):
        run = deploy("apply", "conf.yaml", *args)
        assert run.exit_code == 1, run.output
        assert f"permission denied as {user} on gpu-1: {clean.target}; use become" in run.output
        assert "exit 1 (a step failed; nothing was changed)" in run.output
        assert "would change" not in run.output and "rolled back" not in run.output
        assert clean.untouched()


def test_become_nopasswd_changes_and_rolls_back_as_root(clean: Fleet, tmp_path: Path) -> None:
    deploy = clean.deploy(tmp_path, "nopw")
    check = deploy("apply", "conf.yaml", "--check", "-b")
    assert check.exit_code == 0 and clean.untouched(), check.output

    run = deploy("apply", "conf.yaml", "--yes", "-b")
    assert run.exit_code == 0, run.output
    assert clean.target.read_bytes() == ORIGINAL + b"feature=on\n"
    info = clean.target.stat()
    assert (info.st_uid, info.st_mode & 0o7777) == (0, 0o600), "owner and mode kept"
    state = clean.host.state_dir.stat()
    assert state.st_uid == 0, "state_dir written as root, not as the login user"

    again = deploy("apply", "conf.yaml", "--yes", "--become")
    assert again.exit_code == 0 and "unchanged" in again.output, again.output

    back = deploy("rollback", "--yes", "-b")
    assert back.exit_code == 0, back.output
    assert clean.target.read_bytes() == ORIGINAL


def test_become_with_a_password_sends_it_to_sudo_only(
    clean: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUDO_SECRET", PASSWORD)
    deploy = clean.deploy(tmp_path, "pw", become=True, become_password_env="SUDO_SECRET")
    log = tmp_path / "run.log"
    run = deploy("apply", "conf.yaml", "--yes", "-vv", "--log-file", str(log))
    assert run.exit_code == 0, run.output
    assert clean.target.read_bytes() == ORIGINAL + b"feature=on\n"
    assert PASSWORD not in run.output and PASSWORD not in log.read_text()


def test_the_become_password_is_masked_where_it_shows(
    clean: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """become_password_env's value is a secret like password_env's: kept in the host's file
    too, the plan's diff shows that line as context, masked."""
    monkeypatch.setenv("SUDO_SECRET", PASSWORD)
    clean.target.write_bytes(ORIGINAL + f"admin_pass={PASSWORD}\n".encode())
    deploy = clean.deploy(tmp_path, "pw", become=True, become_password_env="SUDO_SECRET")
    run = deploy("apply", "conf.yaml", "--check")
    assert run.exit_code == 0, run.output
    assert "+feature=on" in run.output and " admin_pass=***" in run.output, run.output
    assert PASSWORD not in run.output


@pytest.mark.parametrize(
    ("role", "password", "expected"),
    [
        ("pw", "wrong-password", "the become password is wrong"),
        ("pw", None, "sudo asks for a password; pass -K"),
        ("none", None, "sudo asks for a password; pass -K"),
        ("none", "anything", "the become password is wrong"),
    ],
)
def test_a_refused_sudo_is_one_line_exit_4_and_nothing_touched(
    clean: Fleet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    role: str,
    password: str | None,
    expected: str,
) -> None:
    extra: dict[str, object] = {"become": True}
    if password is not None:
        monkeypatch.setenv("SUDO_SECRET", password)
        extra["become_password_env"] = "SUDO_SECRET"
    deploy = clean.deploy(tmp_path, role, **extra)
    run = deploy("apply", "conf.yaml", "--yes")
    assert run.exit_code == 4, run.output
    user = clean.users[role]
    assert f"gpu-1: sudo as {user} -> root refused: {expected}" in run.output
    assert "Traceback" not in run.output
    assert clean.untouched()


def test_sudo_without_a_sudoers_rule_but_the_right_password_is_refused(
    clean: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own password is right, but sudoers has no rule for it."""
    user = clean.users["none"]
    _run("chpasswd", stdin=f"{user}:{PASSWORD}\n")
    monkeypatch.setenv("SUDO_SECRET", PASSWORD)
    deploy = clean.deploy(tmp_path, "none", become=True, become_password_env="SUDO_SECRET")
    run = deploy("apply", "conf.yaml", "--yes")
    assert run.exit_code == 4, run.output
    assert f"{user} may not run commands as root (sudoers)" in run.output
    assert clean.untouched()


def _apply_with_k(clean: Fleet, tmp_path: Path, *options: str) -> tuple[int, str]:
    """``deploy apply conf.yaml OPTIONS -b -K`` on a terminal, -K answered with `PASSWORD`."""
    deploy = clean.deploy(tmp_path, "pw")
    env = {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}
    argv = ["apply", "conf.yaml", *options, "-b", "-K"]
    return on_terminal(argv, tmp_path, env, [("BECOME (sudo) password", PASSWORD)])


def test_ask_become_pass_on_a_terminal(clean: Fleet, tmp_path: Path) -> None:
    code, screen = _apply_with_k(clean, tmp_path, "--yes")
    assert code == 0, screen
    assert "<BECOME (sudo) password>" in screen and PASSWORD not in screen, "asked, not echoed"
    assert clean.target.read_bytes() == ORIGINAL + b"feature=on\n"


def test_a_password_asked_for_is_masked_where_it_shows(clean: Fleet, tmp_path: Path) -> None:
    """-K's answer is a secret like a ``password_env`` value: the file holds it (the same
    password kept in an app's config), and the plan's diff shows that line as context."""
    clean.target.write_bytes(ORIGINAL + f"admin_pass={PASSWORD}\n".encode())
    code, screen = _apply_with_k(clean, tmp_path, "--check")
    assert code == 0, screen
    assert "+feature=on" in screen and " admin_pass=***" in screen, screen
    assert PASSWORD not in screen


def test_ask_pass_logs_in_with_a_password_then_k_becomes_root(clean: Fleet, tmp_path: Path) -> None:
    """--ask-pass over a second sshd of the same host that allows passwords (the sandbox's do
    not), then -K: two prompts, one login by password, everything as root."""
    config = (clean.host.workdir / "sshd_config").read_text()
    port = free_port()
    config = re.sub(r"(?m)^Port \d+$", f"Port {port}", config)
    config = re.sub(r"(?m)^PidFile .*$", f'PidFile "{tmp_path}/sshd.pid"', config)
    config = config.replace("PasswordAuthentication no", "PasswordAuthentication yes")
    (tmp_path / "sshd_config").write_text(config)
    log = open(tmp_path / "sshd.log", "wb")  # noqa: SIM115  # closed below
    daemon = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while "Server listening" not in (tmp_path / "sshd.log").read_text():
            assert time.monotonic() < deadline and daemon.poll() is None, "sshd did not start"
            time.sleep(0.05)
        known = tmp_path / "known_hosts"
        blob = clean.host.host_key_line().split(" ", 1)[1]
        known.write_text(f"[127.0.0.1]:{port} {blob}\n")
        deploy = clean.deploy(tmp_path, "pw", port=port, known_hosts=str(known))
        inventory = yaml.safe_load(deploy.inventory.read_text())
        del inventory["hosts"]["gpu-1"]["identity_file"]
        deploy.inventory.write_text(yaml.safe_dump(inventory))
        env = {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}
        code, screen = on_terminal(
            ["apply", "conf.yaml", "--check", "--ask-pass", "-b", "-K"],
            tmp_path,
            env,
            [("SSH password", PASSWORD), ("BECOME (sudo) password", PASSWORD)],
        )
        assert code == 0, screen
        assert "would change" in screen and PASSWORD not in screen
        assert f"Accepted password for {clean.users['pw']}" in (tmp_path / "sshd.log").read_text()
        assert clean.untouched()
    finally:
        daemon.terminate()
        daemon.wait(10)
        log.close()


@pytest.mark.parametrize(
    ("password", "expected"),
    [("wrong-password", "the become password is wrong"), (None, "sudo asks for a password")],
)
def test_a_refused_sudo_under_check_is_one_line_exit_4(
    clean: Fleet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    password: str | None,
    expected: str,
) -> None:
    """Issue 30: a nightly `--check` after a password rotation is exit 4 in one line, not a
    traceback and "internal error" (exit 3)."""
    extra: dict[str, object] = {"become": True}
    if password is not None:
        monkeypatch.setenv("SUDO_SECRET", password)
        extra["become_password_env"] = "SUDO_SECRET"
    deploy = clean.deploy(tmp_path, "pw", **extra)
    for args in (["--check"], ["--check", "--detailed-exitcode"]):
        run = deploy("apply", "conf.yaml", *args)
        assert run.exit_code == 4, run.output
        refused = f"sudo as {clean.users['pw']} -> root refused: {expected}"
        assert [line for line in run.output.splitlines() if refused in line], run.output
        assert "Traceback" not in run.output and "internal error" not in run.output
        assert clean.untouched()


#: A login user's ~/.bashrc that would capture what goes to sudo: ``sudo``, ``exec`` (and
#: the ``/usr/bin/sudo`` bash allows as a function name too) as functions, and aliases.
_INTERCEPTING_BASHRC = """\
_grab() {
  printf '%s\\n' "$*" >> {capture}; _m=
  while [ $# -gt 0 ]; do [ "$1" = -p ] && { _m=$2; break; }; shift; done
  printf '%s' "$_m" >&2; IFS= read -r _pw; printf 'pw=%s\\n' "$_pw" >> {capture}
}
sudo() { _grab "$@"; }
/usr/bin/sudo() { _grab "$@"; }
exec() { _grab "$@"; }
command() { _grab "$@"; }
shopt -s expand_aliases
alias sudo='_grab'
alias exec='_grab'
"""


def test_the_login_users_shell_functions_cannot_intercept_sudo(
    clean: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 point 6: bash reads ~/.bashrc before a command sshd runs; a ``sudo`` (or
    ``exec``) function or alias there must not receive sudo's command or the password."""
    user = clean.users["pw"]
    home = clean.base / f"home-{user}"
    capture = clean.base / f"captured-{user}"
    capture.touch()
    uid, gid = _ids(user)
    os.chown(capture, int(uid), int(gid))
    (home / ".bashrc").write_text(_INTERCEPTING_BASHRC.replace("{capture}", str(capture)))
    _run("usermod", "-s", "/bin/bash", user)
    try:
        monkeypatch.setenv("SUDO_SECRET", PASSWORD)
        deploy = clean.deploy(tmp_path, "pw", become=True, become_password_env="SUDO_SECRET")
        run = deploy("apply", "conf.yaml", "--yes")
        said = capture.read_text()
        assert PASSWORD not in said and said == "", said
        assert run.exit_code == 0, run.output
        assert clean.target.read_bytes() == ORIGINAL + b"feature=on\n"
    finally:
        _run("usermod", "-s", "/bin/sh", user)
        (home / ".bashrc").unlink()


def _ids(user: str) -> tuple[str, str]:
    out = subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True).stdout
    group = subprocess.run(["id", "-g", user], capture_output=True, text=True, check=True).stdout
    return out.strip(), group.strip()
