"""Connects made ahead (`deploy.remote.dial`), against real sshd: a run's first hosts are
dialed, their banner sent, before the SSH stack is imported, and the login uses that socket;
no host is dialed that the run may not touch (input refused, another run holding the
workstation's lock, outside ``--limit``, or an ssh_config that could send the login elsewhere).

The hosts that must not be dialed are plain listening sockets: anything that connects to
them is seen.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy.remote.dial import BANNER
from tests.integration.conftest import Deploy, KimiHost
from tests.integration.terminal import on_terminal

PROBE = "tests.integration.dial_probe"


class Listener:
    """A TCP port on loopback that records every connection and its first line."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.lines: list[bytes] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.settimeout(5)
            try:
                self.lines.append(conn.recv(200))
            except OSError:
                self.lines.append(b"")
            conn.close()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def _events(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _probe(deploy: Deploy, log: Path, monkeypatch: pytest.MonkeyPatch) -> Deploy:
    monkeypatch.setenv("DIAL_PROBE_LOG", str(log))
    return Deploy(deploy.workdir, deploy.inventory, module=PROBE)


def _add_host(deploy: Deploy, name: str, port: int, **extra: object) -> None:
    """Add host ``name`` (127.0.0.1:``port``) to the inventory and to group gpu."""
    document = yaml.safe_load(deploy.inventory.read_text())
    document["hosts"][name] = {"address": "127.0.0.1", "port": port, **extra}
    document["groups"]["gpu"].append(name)
    deploy.inventory.write_text(yaml.safe_dump(document, sort_keys=False))


def test_a_run_logs_in_over_the_socket_dialed_before_paramiko_was_imported(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, deploy = kimi_059
    log = tmp_path / "dial.jsonl"
    result = _probe(deploy, log, monkeypatch)(
        "apply", "kimi-eagle3", "--yes", "--skip-tags", "service"
    )
    assert result.exit_code == 0, result.output
    assert b"set_eagle3_layers_to_capture" in host.model_file.read_bytes()
    start, take = _events(log)
    assert start == {
        "event": "start",
        "paramiko": False,
        "targets": [[host.host.address, host.host.port, 10.0]],
        "dialed": 1,
    }
    assert take == {"event": "take", "target": [host.host.address, host.host.port], "socket": True}


def test_the_dial_sends_the_banner_and_can_be_turned_off(
    kimi_059: tuple[KimiHost, Deploy],
    listener: Listener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What sshd receives first from a dialed socket is the client banner (the login's
    transport then says it sent that one: the first test's login over sshd succeeds with it);
    ``DEPLOY_ABLATE=dial`` (the bench's switch) dials nothing."""
    _, deploy = kimi_059
    _add_host(deploy, "gpu-listener", listener.port)
    first = _probe(deploy, tmp_path / "on.jsonl", monkeypatch)
    first("apply", "kimi-eagle3", "--yes", "--skip-tags", "service", "--forks", "2")
    # the dial's line, then the ordinary login's (the listener is no sshd: that host fails)
    assert listener.lines[0] == f"{BANNER}\r\n".encode()
    monkeypatch.setenv("DEPLOY_ABLATE", "dial")
    log = tmp_path / "off.jsonl"
    result = _probe(deploy, log, monkeypatch)(
        "apply", "kimi-eagle3", "--yes", "--skip-tags", "service", "--forks", "2"
    )
    assert result.exit_code != 2, result.output
    assert [e["dialed"] for e in _events(log) if e["event"] == "start"] == [0]
    assert not any(e["socket"] for e in _events(log) if e["event"] == "take")


#: Each way a run may not touch the listener's host, and the exit it ends with.
REFUSALS = {
    "bad playbook": 2,
    "another run holds the lock": 4,
    "outside --limit": 0,
    "--list-hosts": 0,
    "ssh_config could move a login": None,  # the listener's login is tried (and fails)
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_no_host_is_dialed_that_the_run_may_not_touch(
    kimi_059: tuple[KimiHost, Deploy],
    listener: Listener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusal: str,
) -> None:
    host, deploy = kimi_059
    extra: dict[str, object] = {}
    args = ["apply", "kimi-eagle3", "--yes", "--skip-tags", "service"]
    if refusal == "ssh_config could move a login":
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host elsewhere.invalid\n    HostName 127.0.0.1\n    Port {host.host.port}\n"
        )
        extra["ssh_config"] = str(config)
    _add_host(deploy, "gpu-listener", listener.port, **extra)
    held = None
    if refusal == "bad playbook":
        playbook = deploy.workdir / "broken.yaml"
        text = (deploy.workdir / "playbooks" / "kimi-eagle3.yaml").read_text()
        playbook.write_text(text.replace("steps:", "stepz:", 1))
        args[1] = str(playbook)
    elif refusal == "another run holds the lock":
        from deploy.config.locate import find_playbook
        from deploy.engine import local_lock

        path = find_playbook("kimi-eagle3", deploy.inventory)
        held = local_lock.acquire(path, deploy.inventory, {"run_id": "other"})
    elif refusal == "outside --limit":
        args += ["--limit", host.host.name]
    elif refusal == "--list-hosts":
        args += ["--list-hosts"]
    log = tmp_path / "dial.jsonl"
    try:
        result = _probe(deploy, log, monkeypatch)(*args)
    finally:
        if held is not None:
            held.release()
    expected = REFUSALS[refusal]
    assert expected is None or result.exit_code == expected, (result.exit_code, result.output)
    if expected is None:
        # nothing dialed ahead; the listener's own login reached it: one connection, not two
        assert [e["dialed"] for e in _events(log) if e["event"] == "start"] == [0]
        assert len(listener.lines) == 1 and listener.lines[0].startswith(b"SSH-2.0-"), (
            listener.lines
        )
    else:
        assert listener.lines == []


@pytest.mark.parametrize(
    "unset",
    [
        {"password_env": "DEPLOY_TEST_UNSET_PASSWORD"},
        {"become": True, "become_password_env": "DEPLOY_TEST_UNSET_PASSWORD"},
    ],
)
def test_a_host_not_attempted_for_an_unset_password_env_is_not_dialed(
    kimi_059: tuple[KimiHost, Deploy],
    listener: Listener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unset: dict[str, object],
) -> None:
    """A host whose ``password_env`` or ``become_password_env`` names an unset variable is
    reported "not attempted" (nothing done on it, `deploy.engine.host_run`): its login stops
    before any connect, so no connect may be made ahead to it either (sshd would log an
    unauthenticated client)."""
    _, deploy = kimi_059
    monkeypatch.delenv("DEPLOY_TEST_UNSET_PASSWORD", raising=False)
    _add_host(deploy, "gpu-listener", listener.port, **unset)
    log = tmp_path / "dial.jsonl"
    result = _probe(deploy, log, monkeypatch)(
        "apply", "kimi-eagle3", "--yes", "--skip-tags", "service", "--forks", "2"
    )
    assert "DEPLOY_TEST_UNSET_PASSWORD" in result.output, result.output
    assert [e["dialed"] for e in _events(log) if e["event"] == "start"] == [1]  # the other host
    assert listener.lines == []


def test_the_preview_dials_the_hosts_it_opens_itself_not_the_runs(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path
) -> None:
    """At a terminal without --yes the hosts are first opened by the preview, a --check run
    (every host in one batch: ``serial`` does not apply), and the sockets not taken are closed
    after it. With ``--serial 1 --workers 2`` the run itself would be one process (one host at
    a time) but the preview goes to two worker processes, which connect on their own: a dial
    for the run's first host is never used, and that host sees a connection more."""
    _, deploy = kimi_059
    listeners = [Listener(), Listener()]
    try:
        for number, found in enumerate(listeners):
            _add_host(deploy, f"gpu-listener-{number}", found.port)
        env = {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}
        args = ["apply", "kimi-eagle3", "--skip-tags", "service", "--serial", "1"]
        args += ["--workers", "2", "--forks", "2", "--limit", "gpu-listener-0,gpu-listener-1"]
        code, shown = on_terminal(args, deploy.workdir, env, [("Apply these changes?", "n")])
        assert "gpu-listener-0" in shown, shown
        # each listener: the preview's own login (a worker's), and nothing else
        assert [len(found.lines) for found in listeners] == [1, 1], (code, shown)
    finally:
        for found in listeners:
            found.close()


def test_connect_ahead_false_leaves_that_host_to_its_login(
    kimi_059: tuple[KimiHost, Deploy],
    listener: Listener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The inventory's switch: the other host is still dialed ahead; this one is reached once,
    by its own login (which fails there: the listener is no sshd)."""
    host, deploy = kimi_059
    _add_host(deploy, "gpu-listener", listener.port, connect_ahead=False)
    log = tmp_path / "dial.jsonl"
    result = _probe(deploy, log, monkeypatch)(
        "apply", "kimi-eagle3", "--yes", "--skip-tags", "service", "--forks", "2"
    )
    assert result.exit_code != 2, result.output
    starts = [e for e in _events(log) if e["event"] == "start"]
    assert [s["targets"] for s in starts] == [[[host.host.address, host.host.port, 10.0]]]
    assert len(listener.lines) == 1 and listener.lines[0].startswith(b"SSH-2.0-"), listener.lines
