"""Connecting as people do, over real sshd: ssh_config, keys, passphrases, and every failure in
one line of ours; known_hosts read as OpenSSH reads it.

Everything is on loopback: a refused port is one we bound and closed, a server that never
says hello is a listener in this process, and an unresolvable name is under ``.invalid``
(RFC 6761: never resolves, sends nothing outside). Each test writes its own ssh_config and
known_hosts and passes them explicitly; the real ~/.ssh is never read (HOME is a fresh
directory, see tests/conftest.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.errors import HostKeyMismatch, HostKeyUnknown, HostUnreachable
from deploy.remote import sshauth
from deploy.remote.connect import ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.sandbox.ports import free_port
from deploy.sandbox.sshd import SshdSandbox, SshHost
from tests.integration.conftest import Deploy
from tests.integration.terminal import on_terminal

PASSPHRASE = "correct horse battery"


def settings(host: SshHost, **changes: object) -> ConnectSettings:
    base: dict[str, object] = {
        "name": "gpu-1",
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "identity_file": str(host.identity_file),
        "known_hosts": str(host.known_hosts),
        "connect_timeout": 3.0,
    }
    base.update(changes)
    return ConnectSettings(**base)  # type: ignore[arg-type]


def reach(config: ConnectSettings) -> str:
    """Connect, run ``id -un``, and return it (the login worked end to end)."""
    with RemoteHost(config) as remote:
        return remote.run("id -un", check=True).stdout.strip()


def failure(config: ConnectSettings, kind: type[Exception] = HostUnreachable) -> str:
    with pytest.raises(kind) as caught:
        RemoteHost(config).open().close()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("gpu-1: ")
    for paramiko_words in ("No existing session", "Bad authentication type", "Errno"):
        assert paramiko_words not in message
    return message


def keypair(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "test", "-f", str(path)],
        check=True,
    )
    return path


def authorize(host: SshHost, key: Path) -> None:
    with open(host.workdir / "authorized_keys", "a") as keys:
        keys.write(key.with_name(key.name + ".pub").read_text())


@pytest.fixture(autouse=True)
def no_secrets_between_tests() -> Iterator[None]:
    yield
    sshauth.set_prompter(None)
    sshauth._PROVIDED.clear()
    sshauth._PASSPHRASES.clear()
    sshauth._KEYS.clear()


# -- failures, one line each ------------------------------------------------------------------


def test_refused_port(ssh_host: SshHost) -> None:
    closed = free_port()  # reserved for this process: nothing listens on it
    message = failure(settings(ssh_host, port=closed))
    assert f"127.0.0.1:{closed}: connection refused" in message and "sshd runs" in message


def test_a_port_that_accepts_but_never_says_hello() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    accepted: list[socket.socket] = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
    thread.start()
    try:
        config = ConnectSettings(
            name="gpu-1",
            address="127.0.0.1",
            port=listener.getsockname()[1],
            user="root",
            connect_timeout=1.0,
        )
        message = failure(config)
        assert "accepts connections but no SSH server answered within 1 s" in message
    finally:
        for sock in [listener, *accepted]:
            sock.close()


def test_a_name_that_does_not_resolve() -> None:
    config = ConnectSettings(name="gpu-1", address="gpu-1.invalid", user="root")
    assert "cannot resolve gpu-1.invalid (DNS lookup failed)" in failure(config)


def test_no_key_at_all(ssh_host: SshHost) -> None:
    message = failure(settings(ssh_host, identity_file=None))
    assert "no key or password to log in" in message and "--private-key" in message


def test_a_key_the_server_does_not_accept(ssh_host: SshHost, tmp_path: Path) -> None:
    stranger = keypair(tmp_path / "stranger")
    message = failure(settings(ssh_host, identity_file=str(stranger)))
    assert f"refused login as {ssh_host.user} (tried {stranger})" in message


def test_password_auth_on_a_keys_only_server(
    ssh_host: SshHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSH_SECRET", "hunter2")
    message = failure(settings(ssh_host, identity_file=None, password_env="SSH_SECRET"))
    assert "does not accept password authentication" in message and "use a key" in message


def test_encrypted_key_without_wrong_and_with_its_passphrase(
    ssh_host: SshHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = keypair(tmp_path / "locked", PASSPHRASE)
    authorize(ssh_host, key)
    config = settings(ssh_host, identity_file=str(key), password_env="KEY_SECRET")

    bare = settings(ssh_host, identity_file=str(key))
    assert f"the key {key} is encrypted and no passphrase was given" in failure(bare)

    monkeypatch.setenv("KEY_SECRET", "not it")
    assert f"wrong passphrase for the key {key}" in failure(config)

    monkeypatch.setenv("KEY_SECRET", PASSPHRASE)
    assert reach(config) == ssh_host.user

    # On a terminal the passphrase is asked once per key per run, however many hosts use it.
    asked: list[str] = []
    sshauth.set_prompter(lambda prompt: asked.append(prompt) or PASSPHRASE)
    assert reach(bare) == ssh_host.user and reach(bare) == ssh_host.user
    assert asked == [f"Passphrase for key {key}"]


# -- ssh_config -------------------------------------------------------------------------------


def test_ssh_config_user_port_identity_and_known_hosts_file(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    known = tmp_path / "elsewhere_known_hosts"
    known.write_text(ssh_host.host_key_line() + "\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-alias\n  HostName 127.0.0.1\n  Port {ssh_host.port}\n  User {ssh_host.user}\n"
        f"  IdentityFile {ssh_host.identity_file}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n"
    )
    alias = ConnectSettings(name="gpu-1", address="gpu-alias", ssh_config=str(config))
    assert reach(alias) == ssh_host.user

    # The file named by UserKnownHostsFile is the one consulted: emptied, the key is unknown.
    known.write_text("")
    assert "is not in" in failure(alias, HostKeyUnknown)


def test_proxyjump_through_a_second_host(sshd_sandbox: SshdSandbox, tmp_path: Path) -> None:
    target, jump = sshd_sandbox.start_many(["target", "jump"])
    config = tmp_path / "ssh_config"
    common = (
        f"  HostName 127.0.0.1\n  User {target.user}\n  IdentityFile {target.identity_file}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {target.known_hosts}\n"
    )
    config.write_text(
        f"Host jumpbox\n  Port {jump.port}\n{common}"
        f"Host inside\n  Port {target.port}\n  ProxyJump jumpbox\n{common}"
    )
    inside = ConnectSettings(name="gpu-1", address="inside", ssh_config=str(config))
    before = jump.log_text().count("Accepted publickey")
    assert reach(inside) == target.user
    assert jump.log_text().count("Accepted publickey") == before + 1, "went through the jump"


# -- known_hosts as OpenSSH reads it ----------------------------------------------------------


def test_two_keys_of_one_type_for_a_host_either_is_trusted(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    other = keypair(tmp_path / "other")
    blob = other.with_name("other.pub").read_text().split()[1]
    known = tmp_path / "known_hosts"
    name = f"[127.0.0.1]:{ssh_host.port}"
    known.write_text(f"{name} ssh-ed25519 {blob}\n{ssh_host.host_key_line()}\n")
    assert reach(settings(ssh_host, known_hosts=str(known))) == ssh_host.user


def test_a_revoked_key_is_refused_in_one_line(ssh_host: SshHost, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    line = ssh_host.host_key_line()
    known.write_text(f"{line}\n@revoked * {line.split(' ', 1)[1]}\n")
    message = failure(settings(ssh_host, known_hosts=str(known)), HostKeyMismatch)
    assert "is REVOKED" in message and f"{known}:2" in message


def test_a_host_trusted_only_through_a_cert_authority_is_refused_with_the_reason(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    ca = keypair(tmp_path / "ca")
    subprocess.run(
        ["ssh-keygen", "-q", "-s", str(ca), "-I", "gpu-1", "-h", "-n", "127.0.0.1",
         str(ssh_host.host_key.with_suffix(".pub"))],
        check=True,
    )  # fmt: skip
    known = tmp_path / "known_hosts"
    ca_blob = ca.with_name("ca.pub").read_text().split()[1]
    known.write_text(f"@cert-authority [127.0.0.1]:* ssh-ed25519 {ca_blob}\n")
    message = failure(settings(ssh_host, known_hosts=str(known)), HostKeyUnknown)
    assert (
        "only through @cert-authority" in message and "cannot verify host certificates" in message
    )


def test_a_changed_key_names_the_line_and_the_fix(ssh_host: SshHost, tmp_path: Path) -> None:
    other = keypair(tmp_path / "other")
    blob = other.with_name("other.pub").read_text().split()[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{ssh_host.port} ssh-ed25519 {blob}\n")
    message = failure(settings(ssh_host, known_hosts=str(known)), HostKeyMismatch)
    assert "CHANGED" in message and f"{known}:1" in message and "ssh-keygen -R" in message


# -- the command line: -u, --private-key, --ssh-config, a passphrase asked on the terminal ----


def test_cli_user_private_key_and_ssh_config_with_a_passphrase_prompt(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    key = keypair(tmp_path / "locked", PASSPHRASE)
    authorize(ssh_host, key)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gpu-alias\n  HostName 127.0.0.1\n  Port {ssh_host.port}\n  User nobody-here\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {ssh_host.known_hosts}\n"
    )
    ssh_host.state_dir.mkdir(parents=True, exist_ok=True)
    (tmp_path / "hosts.yaml").write_text(
        f"hosts:\n  gpu-1:\n    address: gpu-alias\n    state_dir: {ssh_host.state_dir}\n"
    )
    deploy = Deploy(tmp_path, tmp_path / "hosts.yaml")
    options = ["--ssh-config", str(config), "-u", ssh_host.user, "--private-key", str(key)]

    # No terminal: one line saying what to do, exit 4.
    run = deploy("status", *options)
    assert run.exit_code == 4, run.output
    assert f"the key {key} is encrypted and no passphrase was given" in run.output
    assert "Traceback" not in run.output

    # ssh_config's User alone is refused; -u wins over it.
    wrong = deploy(
        "status", "--ssh-config", str(config), "--private-key", str(ssh_host.identity_file)
    )
    assert wrong.exit_code == 4 and "refused login as nobody-here" in wrong.output, wrong.output

    env = {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}
    prompt = f"Passphrase for key {key}"
    code, screen = on_terminal(["status", *options], tmp_path, env, [(prompt, PASSPHRASE)])
    assert code == 0, screen
    assert f"<{prompt}>" in screen and PASSPHRASE not in screen
