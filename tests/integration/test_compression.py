"""SSH compression after login, against real sshd: negotiated by default (delayed zlib only),
off with ``compression: false``, and what it is for: a change run sends a fraction of the
bytes (a burst that fits TCP's first windows costs fewer round trips, bench/window.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from deploy.remote.connect import DELAYED, ConnectSettings
from deploy.remote.host import RemoteHost
from deploy.sandbox.sshd import SshdSandbox, SshHost
from deploy.sandbox.wheels import kimi_k25_source
from tests.integration.conftest import MODEL_REL, REPO, Deploy
from tests.support.proxy import CuttingProxy


def _settings(host: SshHost, **changes: object) -> ConnectSettings:
    base: dict[str, object] = {
        "name": host.name,
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "identity_file": str(host.identity_file),
        "known_hosts": str(host.known_hosts),
    }
    base.update(changes)
    return ConnectSettings(**base)  # type: ignore[arg-type]


def _negotiated(settings: ConnectSettings) -> tuple[str, str, tuple[str, ...]]:
    with RemoteHost(settings) as remote:
        assert remote.run("echo ok", check=True).stdout == "ok\n"
        transport = remote.transport._transport()  # type: ignore[attr-defined]
        offered = tuple(transport.get_security_options().compression)
        return transport.local_compression, transport.remote_compression, offered


def test_delayed_zlib_is_negotiated_by_default(ssh_host: SshHost) -> None:
    local, remote, offered = _negotiated(_settings(ssh_host))
    assert (local, remote) == ("zlib@openssh.com", "zlib@openssh.com")
    # Never pre-authentication zlib, which paramiko's own use_compression would also offer.
    assert offered == DELAYED


def test_compression_false_offers_none(ssh_host: SshHost) -> None:
    local, remote, offered = _negotiated(_settings(ssh_host, compression=False))
    assert (local, remote, offered) == ("none", "none", ("none",))


def _proxied_run(
    sandbox: SshdSandbox, tmp_path: Path, name: str, **entry: object
) -> tuple[CuttingProxy, int, bytes]:
    """A change run of kimi-eagle3 through a byte-counting proxy; (proxy, exit, new bytes)."""
    host = sandbox.start(name)
    model = host.root / MODEL_REL
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_bytes(kimi_k25_source("0.5.9"))
    workdir = tmp_path / name
    workdir.mkdir()
    (workdir / "playbooks").symlink_to(REPO / "playbooks")
    proxy = CuttingProxy(host.port)
    known = workdir / "known_hosts"
    key_type, blob = host.host_key.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{proxy.port} {key_type} {blob}\n")
    spec = host.inventory_entry(model_file=str(model))
    spec.update(port=proxy.port, known_hosts=str(known), **entry)
    inventory = workdir / "hosts.yaml"
    document = {
        "hosts": {host.name: spec},
        "groups": {"gpu": [host.name]},
        "vars": {"sglang_python": sys.executable},
    }
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    result = Deploy(workdir, inventory)("apply", "kimi-eagle3", "--yes", "--skip-tags", "service")
    assert result.exit_code == 0, result.output
    return proxy, result.exit_code, model.read_bytes()


def test_a_change_run_sends_a_fraction_of_the_bytes(
    sshd_sandbox: SshdSandbox, tmp_path: Path
) -> None:
    """The same change run, as the CLI makes it: compressed, the
    workstation sends under half the bytes and receives under half (the lock's command
    line, the model file coming back, the batch with the new bytes), and the result is the
    same file."""
    packed, _, packed_file = _proxied_run(sshd_sandbox, tmp_path, "gpu-z")
    plain, _, plain_file = _proxied_run(sshd_sandbox, tmp_path, "gpu-n", compression=False)
    try:
        assert packed_file == plain_file
        assert b"set_eagle3_layers_to_capture" in packed_file
        # The lock's exec (~35 kB of host programs) and the batch: enough to compress, though
        # the saved copy and the new file no longer travel whole (a spliced write).
        assert plain.bytes_up > 45_000, plain.bytes_up
        assert packed.bytes_up < plain.bytes_up / 2, (packed.bytes_up, plain.bytes_up)
        assert packed.bytes_down < plain.bytes_down / 2, (packed.bytes_down, plain.bytes_down)
    finally:
        packed.close()
        plain.close()
