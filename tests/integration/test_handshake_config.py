"""Handshakes ahead of the login and the user's SSH configuration, against a real sshd.

A handshake ahead runs while the input is still being validated, so two things must hold
however ssh_config and Fabric's config are written: it goes only where the login would go
(a routing keyword separated from its value by a tab is still a routing keyword: paramiko
reads it so), and reading the configuration for it runs nothing — neither ssh_config's
``Match exec`` command nor a Fabric ``.py`` config file — before the input is known to be
valid (a command with bad input runs nothing; deploy.remote.connect's docstring).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import Deploy, KimiHost

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]

BAD_PLAYBOOK = "name: bad\nhosts: gpu\nsteps:\n  - backup: {paths: [/etc/hostname]}\n"
BAD_LINE = "bad.yaml:4:13 steps[0].backup.path: missing required key 'path'"


def _edit_inventory(deploy: Deploy, **changes: object) -> None:
    document = yaml.safe_load(deploy.inventory.read_text())
    for entry in document["hosts"].values():
        entry.update(changes)
    deploy.inventory.write_text(yaml.safe_dump(document, sort_keys=False))


def _bad_run(deploy: Deploy) -> None:
    (deploy.workdir / "bad.yaml").write_text(BAD_PLAYBOOK)
    result = deploy("apply", "./bad.yaml", "--yes")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"deploy: {BAD_LINE}"), result.stderr


class _Decoy:
    """A listener on an address the run must never contact: records who connects."""

    def __init__(self, address: str, port: int) -> None:
        self.server = socket.create_server((address, port))
        self.server.settimeout(0.1)
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    self.received.append(conn.recv(256))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.server.close()


@pytest.mark.parametrize("separator", [" ", "\t"])
def test_a_handshake_goes_where_ssh_configs_hostname_sends_the_host(
    make_kimi_hosts: MakeHosts, tmp_path: Path, separator: str
) -> None:
    """The inventory names 127.0.0.3, ssh_config's HostName sends it to 127.0.0.1 (the
    sshd): a connection to 127.0.0.3 would be to a host the run never uses."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.3\n\tHostName{separator}127.0.0.1\n")
    _edit_inventory(deploy, address="127.0.0.3", ssh_config=str(config))
    decoy = _Decoy("127.0.0.3", kimi.host.port)
    try:
        _bad_run(deploy)
        time.sleep(0.3)
    finally:
        decoy.close()
    assert decoy.received == [], decoy.received


def test_ssh_configs_match_exec_is_not_run_for_bad_input(
    make_kimi_hosts: MakeHosts, tmp_path: Path
) -> None:
    """``Match exec`` runs a local command to decide the route: only once the input is valid
    (at the login), never for a command that exits 2."""
    _, deploy = make_kimi_hosts(["0.5.9"])
    marker = tmp_path / "match-exec-ran"
    config = tmp_path / "ssh_config"
    config.write_text(f'Match exec "touch {marker}; false"\n  User nobody\n')
    _edit_inventory(deploy, ssh_config=str(config))
    _bad_run(deploy)
    time.sleep(0.3)
    assert not marker.exists()


def test_a_fabric_python_config_is_not_run_for_bad_input(
    make_kimi_hosts: MakeHosts, isolated_env: Path, tmp_path: Path
) -> None:
    """Fabric executes ~/.fabric.py to read its config: only once the input is valid."""
    _, deploy = make_kimi_hosts(["0.5.9"])
    marker = tmp_path / "fabric-py-ran"
    (isolated_env / ".fabric.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    _bad_run(deploy)
    time.sleep(0.3)
    assert not marker.exists()
