"""The sshd sandbox, checked with plain paramiko: every real-SSH test stands on it.

No mocks: if these pass, a daemon really accepts the sandbox's client key, really checks its
host key against the sandbox's known_hosts, and really leaves no process behind.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import paramiko
import pytest
import yaml

from deploy.config.inventory import Inventory
from deploy.sandbox import sshd
from deploy.sandbox.sshd import SshdSandbox, SshHost
from deploy.sandbox.sshd_setup import SandboxError


def connect(host: SshHost, known_hosts: Path | None = None) -> paramiko.SSHClient:
    """Log in the strict way: only the sandbox key, only known host keys, no agent."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts or host.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=str(host.identity_file),
            allow_agent=False,
            look_for_keys=False,
            timeout=5,
        )
    except BaseException:
        client.close()
        raise
    return client


def run(client: paramiko.SSHClient, command: str) -> str:
    _, stdout, _ = client.exec_command(command)
    output: str = stdout.read().decode()
    assert stdout.channel.recv_exit_status() == 0, command
    return output


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_two_hosts_answer_exec_and_sftp(sshd_sandbox: SshdSandbox) -> None:
    hosts = sshd_sandbox.start_many(["web1", "web2"], env={"GREETING": "hello world"})
    assert len({h.port for h in hosts}) == 2
    for host in hosts:
        (host.root / "etc").mkdir()
        (host.root / f"{host.name}.txt").write_text(host.name)
        with connect(host) as client:
            assert run(client, "echo hi") == "hi\n"
            greeting = run(client, 'echo "$GREETING|$DEPLOY_SANDBOX_ROOT"')
            assert greeting == f"hello world|{host.root}\n"
            with client.open_sftp() as sftp:
                assert sorted(sftp.listdir(str(host.root))) == ["etc", f"{host.name}.txt"]
        assert f"Accepted publickey for {host.user}" in host.log_text()
        assert not host.state_dir.exists()


def test_inventory_and_known_hosts_cover_every_host(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> None:
    hosts = sshd_sandbox.start_many(["a", "b"])
    path = sshd_sandbox.write_inventory(
        tmp_path / "hosts.yaml",
        hosts,
        groups={"gpu": ["a", "b"]},
        vars={"model": "kimi"},
        host_vars={"a": {"rank": 0}},
    )
    raw = yaml.safe_load(path.read_text())
    assert raw["hosts"]["a"] == hosts[0].inventory_entry(rank=0)
    inventory = Inventory.model_validate(raw)
    assert inventory.host("b").port == hosts[1].port
    assert inventory.host("a").vars == {"root": str(hosts[0].root), "rank": 0}
    assert inventory.vars == {"model": "kimi"}
    lines = hosts[0].known_hosts.read_text().splitlines()
    assert lines == [h.host_key_line() for h in hosts]
    assert lines[0].startswith(f"[127.0.0.1]:{hosts[0].port} ssh-ed25519 ")


def test_a_changed_host_key_is_refused(ssh_host: SshHost, tmp_path: Path) -> None:
    port, old_key = ssh_host.port, ssh_host.host_key_line()
    ssh_host.restart()
    connect(ssh_host).close()  # same key: still trusted
    ssh_host.restart(new_host_key=True)
    assert (ssh_host.port, ssh_host.is_running()) == (port, True)
    assert ssh_host.host_key_line() != old_key
    with pytest.raises(paramiko.BadHostKeyException):
        connect(ssh_host)
    trusted = tmp_path / "trusted"
    trusted.write_text(ssh_host.host_key_line() + "\n")
    connect(ssh_host, trusted).close()


@pytest.mark.ssh
def test_close_leaves_no_process_and_closed_ports_refuse(tmp_path: Path) -> None:
    with SshdSandbox(tmp_path / "sandbox") as sandbox:
        hosts = sandbox.start_many(["a", "b"])
        client = connect(hosts[0])
        _, session, _ = client.exec_command("echo started; exec sleep 300")
        assert session.readline() == "started\n"
        background = "cd / ; setsid nohup sleep 301 > /dev/null 2>&1 < /dev/null & echo $!"
        detached = int(run(client, background))
        listeners = {int((h.workdir / "sshd.pid").read_text()) for h in hosts}
        pids = hosts[0].processes() | hosts[1].processes()
        assert listeners | {detached} < pids  # plus the session's sshd and sleep processes
    client.close()
    assert [pid for pid in pids if alive(pid)] == []
    assert not any(h.is_running() for h in hosts)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((hosts[0].address, hosts[0].port), timeout=5).close()
    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError):
        connect(hosts[1])


@pytest.mark.ssh
def test_an_exception_inside_with_still_stops_the_daemons(tmp_path: Path) -> None:
    with pytest.raises(KeyError), SshdSandbox(tmp_path / "sandbox") as sandbox:
        host = sandbox.start("a")
        listener = int((host.workdir / "sshd.pid").read_text())
        raise KeyError("boom")
    assert not alive(listener)


def test_a_taken_port_is_retried_on_another(
    sshd_sandbox: SshdSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real_pick, first = sshd.pick_ports, [[taken]]

        def pick_taken_first(count: int, avoid: set[int] | frozenset[int]) -> list[int]:
            return first.pop() if first else real_pick(count, avoid)

        monkeypatch.setattr(sshd, "pick_ports", pick_taken_first)
        host = sshd_sandbox.start("a")
    assert host.port != taken
    assert "Address already in use" in host.log_text()
    connect(host).close()


def test_a_daemon_that_cannot_start_says_why(ssh_host: SshHost) -> None:
    ssh_host.stop()
    assert not ssh_host.is_running()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", ssh_host.port))
        squatter.listen()
        with pytest.raises(SandboxError, match="Address already in use"):
            ssh_host.restart()


@pytest.mark.parametrize("names", [["../x"], ["known_hosts"], ["a", "a"], [""]])
def test_bad_host_names_are_refused(sshd_sandbox: SshdSandbox, names: list[str]) -> None:
    with pytest.raises(SandboxError):
        sshd_sandbox.start_many(names)
    assert sshd_sandbox.hosts == {}


def test_the_environment_is_hermetic(isolated_env: Path) -> None:
    assert Path.home() == isolated_env
    assert "SSH_AUTH_SOCK" not in os.environ and "DEPLOY_INVENTORY" not in os.environ
    assert os.environ["XDG_STATE_HOME"].startswith(str(isolated_env))
    assert not os.environ["DEPLOY_WHEEL_CACHE"].startswith(str(isolated_env))
