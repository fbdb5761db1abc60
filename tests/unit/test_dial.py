"""`deploy.remote.dial` (connects made ahead) and `Prepared.first_wave` (which hosts): what is
dialed, what a dialed socket sends, when it is not used. Loopback sockets, no sshd."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.engine.batches import parse_serial
from deploy.engine.prepare import Prepared
from deploy.remote import dial


@pytest.fixture(autouse=True)
def _nothing_left() -> Iterator[None]:
    yield
    dial.discard()


@pytest.fixture
def no_configs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fabric's default ssh_config files and its own config files: none (this machine's own
    must not decide a test)."""
    monkeypatch.setattr(dial, "_USER", str(tmp_path / "absent-user-config"))
    monkeypatch.setattr(dial, "_SYSTEM", str(tmp_path / "absent-system-config"))
    monkeypatch.setattr(dial, "_FABRIC", (str(tmp_path / "absent-etc-fabric."),))


@pytest.mark.parametrize(
    "text",
    [
        "Host db\n  HostName 10.0.0.5\n",
        "Host *\n\tport 2222\n",
        "ProxyJump=bastion\n",
        "Host x\n  ProxyCommand nc %h %p\n",
        "Match host x exec true\n  User y\n",
    ],
)
def test_a_config_that_can_move_a_login_stops_every_dial(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    assert dial.movable(str(config))


def test_canonicalize_hostname_moves_a_login_so_it_stops_every_dial(tmp_path: Path) -> None:
    """paramiko's `SSHConfig.lookup` canonicalizes (CanonicalizeHostname, CanonicalDomains):
    Fabric's ``conn.host`` becomes another name than the inventory's address."""
    from fabric import Config, Connection

    config = tmp_path / "config"
    config.write_text("CanonicalizeHostname yes\nCanonicalizeMaxDots 2\nCanonicalDomains 1\n")
    conn = Connection("127.0.0", config=Config(runtime_ssh_path=str(config)))
    assert conn.host == "127.0.0.1"  # the login's address; a dial would go to "127.0.0"
    assert dial.movable(str(config))


def test_a_config_that_cannot_move_a_login_allows_the_dial(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "# HostName in a comment\nHost *\n  User ops\n  IdentityFile ~/.ssh/id_ed25519\n"
        "  SendEnv LANG LC_*\n  UserKnownHostsFile ~/.ssh/known_hosts\n"
    )
    assert not dial.movable(str(config))


def test_includes_are_followed_relative_to_the_including_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    main = tmp_path / ".ssh" / "config"
    main.write_text('Include "conf.d/*.conf"\nHost *\n  User ops\n')
    (tmp_path / ".ssh" / "conf.d" / "a.conf").write_text("Host a\n  User x\n")
    assert not dial.movable(str(main))
    (tmp_path / ".ssh" / "conf.d" / "b.conf").write_text("Host b\n  Hostname b.internal\n")
    assert dial.movable(str(main))
    loop = tmp_path / "loop"
    loop.write_text(f"Include {loop}\n")
    assert dial.movable(str(loop))  # an Include loop counts as "could move", never hangs


@pytest.mark.parametrize("name", ["absent", "~/exists-only-expanded"])
def test_an_ssh_config_fabric_cannot_open_stops_every_dial(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_configs: None,
    name: str,
    server: socket.socket,
) -> None:
    """The inventory's ``ssh_config`` (or --ssh-config) that Fabric will not open (a typo;
    Fabric tests ``os.path.exists`` before expanding ``~``) makes every login an input error
    ("not attempted", nothing done on the host): nothing may be dialed to those hosts."""
    from fabric import Config

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "exists-only-expanded").write_text("Host *\n  User ops\n")
    monkeypatch.chdir(tmp_path)
    path = name if name.startswith("~") else str(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        Config(runtime_ssh_path=path)
    port = server.getsockname()[1]
    assert dial.start([("127.0.0.1", port, 5.0)], [path]) == 0
    server.close()


@pytest.mark.parametrize(
    "text", [b"Host *\n  IdentitiesOnly\n", b'Host "db\n  User ops\n', b"# caf\xe9\nHost *\n"]
)
def test_a_config_paramiko_cannot_read_stops_every_dial(tmp_path: Path, text: bytes) -> None:
    """A file Fabric cannot load (a keyword without its value, a Host line shlex cannot split,
    bytes that are not UTF-8) fails every login before it connects: nothing may be dialed."""
    import paramiko
    from fabric import Config

    config = tmp_path / "config"
    config.write_bytes(text)
    with pytest.raises((paramiko.SSHException, ValueError)):
        Config(runtime_ssh_path=str(config))
    assert dial.movable(str(config))


def test_an_unreadable_config_counts_as_moving(tmp_path: Path) -> None:
    assert dial.movable(str(tmp_path))  # a directory: cannot be read as a file


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A listening loopback port, closed when the test ends (passed or not)."""
    listening = socket.create_server(("127.0.0.1", 0))
    yield listening
    listening.close()


def test_a_dialed_socket_has_sent_the_banner_and_drops_paramikos_write_of_it(
    no_configs: None, server: socket.socket
) -> None:
    port = server.getsockname()[1]
    assert dial.start([("127.0.0.1", port, 5.0)], [None]) == 1
    peer, _ = server.accept()
    sock = dial.take("127.0.0.1", port)
    assert sock is not None and isinstance(sock, socket.socket)
    line = f"{dial.BANNER}\r\n".encode()
    assert sock.banner == dial.BANNER  # type: ignore[attr-defined]  # a _BannerSent
    # paramiko writes its banner, then (in a later call) its packets: only the packets go
    assert sock.send(line) == len(line)
    assert sock.send(b"KEXINIT") == 7
    peer.settimeout(5)
    received = b""
    while len(received) < len(line) + 7:
        received += peer.recv(100)
    assert received == line + b"KEXINIT"
    sock.close()
    peer.close()
    server.close()


@pytest.mark.parametrize("way", ["sendall", "in pieces"])
def test_paramikos_banner_is_dropped_whichever_way_it_is_written(
    no_configs: None, way: str, server: socket.socket
) -> None:
    """A paramiko that writes its banner with `sendall`, or in pieces, still logs in: the
    banner reaches the server once (sshd reads a second one as a broken packet), and no piece
    is refused as "not the banner" (the login would fail instead of connecting)."""
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    peer, _ = server.accept()
    sock = dial.take("127.0.0.1", port)
    assert sock is not None
    line = f"{dial.BANNER}\r\n".encode()
    if way == "sendall":
        sock.sendall(line)
        sock.sendall(b"KEXINIT")
    else:
        assert sock.send(line[:-2]) == len(line) - 2
        assert sock.send(b"\r\nKEX") == 5
        sock.sendall(b"INIT")
    peer.settimeout(5)
    received = b""
    while len(received) < len(line) + 7:
        received += peer.recv(100)
    assert received == line + b"KEXINIT"
    sock.close()
    peer.close()
    server.close()


def test_a_different_first_write_is_refused_not_mixed_in(
    no_configs: None, server: socket.socket
) -> None:
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    sock = dial.take("127.0.0.1", port)
    assert sock is not None
    with pytest.raises(OSError, match="banner was already sent"):
        sock.send(b"SSH-2.0-OpenSSH_9.6\r\n")
    sock.close()
    server.close()


def test_a_failed_connect_is_raised_at_the_login_and_nothing_is_dialed_twice(
    no_configs: None, server: socket.socket
) -> None:
    port = server.getsockname()[1]
    server.close()  # a closed loopback port: refused
    assert dial.start([("127.0.0.1", port, 5.0), ("127.0.0.1", port, 5.0)], [None, None]) == 1
    with pytest.raises(ConnectionRefusedError):
        dial.take("127.0.0.1", port)
    assert dial.take("127.0.0.1", port) is None  # taken once; the login then connects itself


def test_an_old_or_unknown_socket_is_not_used(
    no_configs: None, monkeypatch: pytest.MonkeyPatch, server: socket.socket
) -> None:
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    assert dial.take("127.0.0.2", port) is None
    monkeypatch.setattr(dial, "MAX_AGE", -1.0)
    assert dial.take("127.0.0.1", port) is None
    server.close()


def test_a_socket_the_server_hung_up_is_not_used(no_configs: None, server: socket.socket) -> None:
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    peer, _ = server.accept()
    peer.settimeout(5)
    assert peer.recv(100).startswith(b"SSH-2.0-")
    peer.close()  # sshd's LoginGraceTime, or a restart
    time.sleep(0.05)
    assert dial.take("127.0.0.1", port) is None
    server.close()


def test_discard_closes_what_no_login_took(no_configs: None, server: socket.socket) -> None:
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    peer, _ = server.accept()
    dial.discard()
    peer.settimeout(5)
    assert peer.recv(100).startswith(b"SSH-2.0-")
    assert peer.recv(100) == b""  # closed by the client
    assert dial.take("127.0.0.1", port) is None
    peer.close()
    server.close()


def test_nothing_is_dialed_under_a_moving_config_or_the_ablation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_configs: None
) -> None:
    config = tmp_path / "config"
    config.write_text("Host *\n  Port 2200\n")
    assert dial.start([("127.0.0.1", 9, 5.0)], [None, str(config)]) == 0
    monkeypatch.setattr("deploy.ablation.OFF", frozenset({"dial"}))
    assert dial.start([("127.0.0.1", 9, 5.0)], [None]) == 0
    assert dial.take("127.0.0.1", 9) is None


@pytest.mark.parametrize(
    "text", ["gateway: jump.invalid\n", "port: 2200\n", "ssh_config_path: {moving}\n"]
)
def test_fabrics_own_config_file_that_moves_a_login_stops_every_dial(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_configs: None,
    text: str,
    server: socket.socket,
) -> None:
    """~/.fabric.yaml is read by Fabric's `Config` for every login (deploy.remote.connect):
    a gateway there sends the login through a jump host, a port elsewhere, an
    ssh_config_path replaces even the inventory's ssh_config. A dial would reach a host (or
    port) the login never does."""
    from fabric import Config, Connection

    home = tmp_path / "home"
    home.mkdir()
    moving = tmp_path / "moving"
    moving.write_text("Host *\n  HostName 127.0.0.9\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(dial, "_FABRIC", (str(tmp_path / "etc-fabric."), "~/.fabric."))
    (home / ".fabric.yaml").write_text(text.format(moving=moving))
    inventory_config = tmp_path / "inventory-ssh-config"
    inventory_config.write_text("Host *\n  User ops\n")
    conn = Connection("127.0.0.1", config=Config(runtime_ssh_path=str(inventory_config)))
    assert (conn.host, conn.port, conn.gateway) != ("127.0.0.1", 22, None)  # the login moved
    port = server.getsockname()[1]
    assert dial.start([("127.0.0.1", port, 5.0)], [str(inventory_config)]) == 0
    assert dial.take("127.0.0.1", port) is None
    server.close()


def test_fabric_config_that_cannot_move_a_login_allows_the_dial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_configs: None
) -> None:
    monkeypatch.setattr(dial, "_FABRIC", (str(tmp_path / "fabric."),))
    (tmp_path / "fabric.yaml").write_text("user: ops\nconnect_kwargs: {}\n")
    assert not dial.fabric_moves()
    (tmp_path / "fabric.py").write_text("port = 2200\n")
    assert dial.fabric_moves()  # Python: whatever it sets counts


def _prepared(names: list[str], serial: str | None = None) -> Prepared:
    plans = [SimpleNamespace(name=name) for name in names]
    return Prepared(Path("hosts.yaml"), None, plans, parse_serial(serial) if serial else None)


def test_the_first_wave_is_the_first_batch_up_to_forks() -> None:
    names = [f"h{i}" for i in range(6)]
    wave = _prepared(names).first_wave(4, None, check=False)
    assert [p.name for p in wave] == ["h0", "h1", "h2", "h3"]
    serial = _prepared(names, "2").first_wave(10, 1, check=False)
    assert [p.name for p in serial] == ["h0", "h1"]
    # --check ignores serial (every host is planned at once), as the engine does
    assert len(_prepared(names, "2").first_wave(10, 1, check=True)) == 6


def test_no_wave_when_the_hosts_go_to_worker_processes() -> None:
    names = [f"h{i}" for i in range(6)]
    assert _prepared(names).first_wave(6, 2, check=False) == []


def test_a_login_refused_before_its_connect_closes_the_socket_dialed_for_it(
    no_configs: None, tmp_path: Path, server: socket.socket
) -> None:
    """A login that stops before it takes its socket (here: an encrypted key and nobody to ask
    for its passphrase) closes the socket dialed for it at once, rather than leaving an
    unauthenticated client on the host until the whole run ends (`dial.discard`)."""
    import paramiko

    from deploy.errors import HostUnreachable
    from deploy.remote.connect import open_connection
    from deploy.remote.settings import ConnectSettings
    from deploy.remote.sshauth import set_prompter

    key = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(1024).write_private_key_file(str(key), password="secret")
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  IdentitiesOnly yes\n")
    port = server.getsockname()[1]
    assert dial.start([("127.0.0.1", port, 5.0)], [str(config)]) == 1
    peer, _ = server.accept()
    peer.settimeout(5)
    assert peer.recv(100).startswith(b"SSH-2.0-")
    set_prompter(None)
    settings = ConnectSettings(
        name="h",
        address="127.0.0.1",
        port=port,
        identity_file=str(key),
        known_hosts=str(tmp_path / "known_hosts"),
        ssh_config=str(config),
    )
    with pytest.raises(HostUnreachable, match="passphrase"):
        open_connection(settings)
    assert peer.recv(100) == b""  # closed by the client now
    peer.close()
    server.close()
