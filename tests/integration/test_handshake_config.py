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
import time
from pathlib import Path

import pytest

from tests.integration.handshakes import Listener, MakeHosts, bad_run, edit_inventory


class _Decoy(Listener):
    """A listener on an address the run must never contact: records who connects."""

    def __init__(self, address: str, port: int) -> None:
        self.received: list[bytes] = []
        super().__init__(address, port)

    def handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            try:
                self.received.append(conn.recv(256))
            except OSError:
                self.received.append(b"")


@pytest.mark.parametrize("separator", [" ", "\t"])
def test_a_handshake_goes_where_ssh_configs_hostname_sends_the_host(
    make_kimi_hosts: MakeHosts, tmp_path: Path, separator: str
) -> None:
    """The inventory names 127.0.0.3, ssh_config's HostName sends it to 127.0.0.1 (the
    sshd): a connection to 127.0.0.3 would be to a host the run never uses."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.3\n\tHostName{separator}127.0.0.1\n")
    edit_inventory(deploy, address="127.0.0.3", ssh_config=str(config))
    decoy = _Decoy("127.0.0.3", kimi.host.port)
    try:
        bad_run(deploy)
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
    edit_inventory(deploy, ssh_config=str(config))
    bad_run(deploy)
    time.sleep(0.3)
    assert not marker.exists()


def test_a_fabric_python_config_is_not_run_for_bad_input(
    make_kimi_hosts: MakeHosts, isolated_env: Path, tmp_path: Path
) -> None:
    """Fabric executes ~/.fabric.py to read its config: only once the input is valid."""
    _, deploy = make_kimi_hosts(["0.5.9"])
    marker = tmp_path / "fabric-py-ran"
    (isolated_env / ".fabric.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    bad_run(deploy)
    time.sleep(0.3)
    assert not marker.exists()
