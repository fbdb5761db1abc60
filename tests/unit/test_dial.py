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
    dial.close_all()


@pytest.fixture
def no_configs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fabric's default ssh_config files: none (this machine's own must not decide a test)."""
    monkeypatch.setattr(dial, "_USER", str(tmp_path / "absent-user-config"))
    monkeypatch.setattr(dial, "_SYSTEM", str(tmp_path / "absent-system-config"))


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


def test_a_config_that_cannot_move_a_login_allows_the_dial(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "# HostName in a comment\nHost *\n  User ops\n  IdentityFile ~/.ssh/id_ed25519\n"
        "  SendEnv LANG LC_*\n  UserKnownHostsFile ~/.ssh/known_hosts\n"
    )
    assert not dial.movable(str(config))
    assert not dial.movable(str(tmp_path / "absent"))


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


def test_an_unreadable_config_counts_as_moving(tmp_path: Path) -> None:
    assert dial.movable(str(tmp_path))  # a directory: cannot be read as a file


def _server() -> socket.socket:
    return socket.create_server(("127.0.0.1", 0))


def test_a_dialed_socket_has_sent_the_banner_and_drops_paramikos_write_of_it(
    no_configs: None,
) -> None:
    server = _server()
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


def test_a_different_first_write_is_refused_not_mixed_in(no_configs: None) -> None:
    server = _server()
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    sock = dial.take("127.0.0.1", port)
    assert sock is not None
    with pytest.raises(OSError, match="banner was already sent"):
        sock.send(b"SSH-2.0-OpenSSH_9.6\r\n")
    sock.close()
    server.close()


def test_a_failed_connect_is_raised_at_the_login_and_nothing_is_dialed_twice(
    no_configs: None,
) -> None:
    server = _server()
    port = server.getsockname()[1]
    server.close()  # a closed loopback port: refused
    assert dial.start([("127.0.0.1", port, 5.0), ("127.0.0.1", port, 5.0)], [None, None]) == 1
    with pytest.raises(ConnectionRefusedError):
        dial.take("127.0.0.1", port)
    assert dial.take("127.0.0.1", port) is None  # taken once; the login then connects itself


def test_an_old_or_unknown_socket_is_not_used(
    no_configs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server()
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    assert dial.take("127.0.0.2", port) is None
    monkeypatch.setattr(dial, "MAX_AGE", -1.0)
    assert dial.take("127.0.0.1", port) is None
    server.close()


def test_a_socket_the_server_hung_up_is_not_used(no_configs: None) -> None:
    server = _server()
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    peer, _ = server.accept()
    peer.settimeout(5)
    assert peer.recv(100).startswith(b"SSH-2.0-")
    peer.close()  # sshd's LoginGraceTime, or a restart
    time.sleep(0.05)
    assert dial.take("127.0.0.1", port) is None
    server.close()


def test_close_all_closes_what_no_login_took(no_configs: None) -> None:
    server = _server()
    port = server.getsockname()[1]
    dial.start([("127.0.0.1", port, 5.0)], [None])
    peer, _ = server.accept()
    dial.close_all()
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
