"""`deploy.remote.connect.fabric_connection`: the same connection Fabric builds, without
rebuilding its Config for ``inline_ssh_env`` nor computing ``dir()`` on every assignment
(~0.8 ms of the client's CPU per host). Nothing here opens a connection.
"""

from __future__ import annotations

from pathlib import Path

import fabric
import invoke.config
import pytest

from deploy.remote import connect
from deploy.remote.settings import ConnectSettings

_SSH_CONFIG = """\
Host gpu-alias
  HostName 127.0.0.9
  User deploy
  Port 2201
  IdentityFile ~/.ssh/gpu_key
  ForwardAgent yes
  ConnectTimeout 7
Host behind
  HostName 127.0.0.10
  ProxyJump jumper@127.0.0.11:2202
"""

_FIELDS = (
    "host",
    "original_host",
    "user",
    "port",
    "ssh_config",
    "forward_agent",
    "connect_timeout",
    "connect_kwargs",
    "inline_ssh_env",
)


def _fabric_as_is(settings: ConnectSettings) -> fabric.Connection:
    """What `fabric_connection` built before: Fabric's own class, same arguments."""
    return fabric.Connection(
        settings.address,
        user=settings.user,
        port=settings.port,
        config=fabric.Config(runtime_ssh_path=settings.ssh_config),
        connect_timeout=int(max(1, round(settings.connect_timeout))),
        connect_kwargs=connect._timeouts(settings),
    )


@pytest.mark.parametrize(
    "settings",
    [
        ConnectSettings(name="a", address="gpu-alias"),
        ConnectSettings(name="b", address="gpu-alias", user="root", port=2222),
        ConnectSettings(name="c", address="127.0.0.1", port=2222, user="root"),
        ConnectSettings(name="d", address="behind", user="ops"),
    ],
    ids=["from-ssh-config", "overridden", "plain", "proxyjump"],
)
def test_the_connection_is_the_one_fabric_builds(
    isolated_env: Path, tmp_path: Path, settings: ConnectSettings
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(_SSH_CONFIG)
    settings = ConnectSettings(**{**settings.__dict__, "ssh_config": str(config)})
    ours, theirs = connect.fabric_connection(settings), _fabric_as_is(settings)
    assert isinstance(ours, fabric.Connection)
    for name in _FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert type(ours.gateway) is type(theirs.gateway)
    if theirs.gateway is not None:
        assert (ours.gateway.host, ours.gateway.user, ours.gateway.port) == (
            theirs.gateway.host,
            theirs.gateway.user,
            theirs.gateway.port,
        )
    # Assignments still go where Fabric sends them: its attributes stay attributes, and an
    # unknown name is a config key, as invoke's DataProxy has it.
    ours.connect_timeout = 3
    assert ours.connect_timeout == 3 and "connect_timeout" in vars(ours)
    ours.some_setting = "x"  # type: ignore[attr-defined]
    assert ours.config["some_setting"] == "x" and "some_setting" not in vars(ours)


def test_twenty_connections_rebuild_no_config(
    isolated_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(_SSH_CONFIG)
    merges: list[int] = []
    real = invoke.config.Config.merge

    def counting(self: invoke.config.Config) -> None:
        merges.append(1)
        real(self)

    monkeypatch.setattr(invoke.config.Config, "merge", counting)
    fabric.Config(runtime_ssh_path=str(config))
    per_config = len(merges)
    merges.clear()
    for n in range(20):
        connect.fabric_connection(
            ConnectSettings(name=f"gpu-{n}", address="gpu-alias", ssh_config=str(config))
        )
    assert len(merges) == 20 * per_config, "only each host's Config is merged, once built"
