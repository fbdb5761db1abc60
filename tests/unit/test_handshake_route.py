"""`deploy.remote.handshake.direct`: when a host's TCP connect may start before ssh_config is
read the way Fabric reads it — only when no ssh_config could send it elsewhere.

A wrong "direct" would contact an address the run never uses (or skip a ProxyJump), so the
scan errs on the side of "not direct": any routing keyword anywhere, in any Host block, in
any included file, counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.remote.handshake import direct, inert
from deploy.remote.settings import ConnectSettings


def _settings(config: Path) -> ConnectSettings:
    return ConnectSettings(name="gpu-1", address="127.0.0.1", port=2222, ssh_config=str(config))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("Host *\n  SendEnv LANG LC_*\n  HashKnownHosts yes\n", True),
        ("# ProxyJump bastion\nHost *\n  ServerAliveInterval 30\n", True),
        ("Host gpu-*\n  ProxyJump bastion\n", False),
        ("Host other\n  HostName 10.0.0.1\n", False),
        ("Host *\n  Port 2200\n", False),
        ("Host x\n  ProxyCommand nc %h %p\n", False),
        ("Match host 127.0.0.1\n  User root\n", False),
        ("Host *\n  proxyjump=bastion\n", False),
        ("Host *\n  CanonicalizeHostname yes\n", False),
        # paramiko splits a keyword from its value at any whitespace (or "="): a tab too.
        ("Host gpu-1\n\tHostName\t10.0.0.1\n", False),
        ("Host *\n  ProxyJump\tbastion\n", False),
        ("Host *\n  Port\t=\t2200\n", False),
        ("Host *\n  ServerAliveInterval\t30\n", True),
    ],
)
def test_routing_keywords_anywhere_make_a_host_indirect(
    tmp_path: Path, text: str, expected: bool
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(text)
    assert direct(_settings(config)) is expected


def test_included_files_are_read_too(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "jump.conf").write_text("Host gpu-1\n  ProxyJump bastion\n")
    config = tmp_path / "ssh_config"
    config.write_text("Include conf.d/*.conf\nHost *\n  SendEnv LANG\n")
    assert direct(_settings(config)) is False
    (tmp_path / "conf.d" / "jump.conf").write_text("Host *\n  ServerAliveInterval 5\n")
    assert direct(_settings(config)) is True


def test_without_an_ssh_config_the_user_and_system_files_count(isolated_env: Path) -> None:
    settings = ConnectSettings(name="gpu-1", address="127.0.0.1")
    (isolated_env / ".ssh").mkdir()
    (isolated_env / ".ssh" / "config").write_text("Host gpu-1\n  HostName 10.1.2.3\n")
    assert direct(settings) is False


def test_a_fabric_config_file_makes_every_host_indirect(isolated_env: Path, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("")
    assert direct(_settings(config)) is True
    (isolated_env / ".fabric.yaml").write_text("port: 2200\n")
    assert direct(_settings(config)) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Host *\n  HostName 10.0.0.1\n", True),
        ('Match exec "test -f ~/.vpn"\n  ProxyJump bastion\n', False),
        ('Match host gpu-*\t!exec "true"\n  User root\n', False),
        ("Include conf.d/*.conf\n", False),
    ],
)
def test_a_match_exec_keeps_the_host_from_being_negotiated_ahead(
    tmp_path: Path, text: str, expected: bool
) -> None:
    """paramiko runs a ``Match exec`` command when it reads ssh_config: not ahead of valid
    input (an included file counts too)."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "vpn.conf").write_text('Match exec "vpn-up"\n  User root\n')
    config = tmp_path / "ssh_config"
    config.write_text(text)
    assert inert(_settings(config)) is expected


def test_a_fabric_config_file_keeps_every_host_from_being_negotiated_ahead(
    isolated_env: Path, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("")
    assert inert(_settings(config)) is True
    (isolated_env / ".fabric.py").write_text("port = 2200\n")
    assert inert(_settings(config)) is False
