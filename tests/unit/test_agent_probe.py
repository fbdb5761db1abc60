"""The host-side helper: listening addresses from /proc/net/tcp{,6} (issue 12.3), and where an
interpreter finds a module without importing it (12.4)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from deploy.hostpy.agent_proc import _address, _listen_table, _listens_on, resolve_imports


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("0100007F:1F90", "127.0.0.1:8080"),
        ("00000000:7530", "0.0.0.0:30000"),
        ("0101A8C0:0050", "192.168.1.1:80"),
        ("00000000000000000000000000000000:7530", "[::]:30000"),
        ("00000000000000000000000001000000:7530", "[::1]:30000"),
        ("0000000000000000FFFF00000100007F:7530", "[::ffff:127.0.0.1]:30000"),
    ],
)
def test_proc_net_tcp_addresses(raw: str, text: str) -> None:
    assert _address(raw) == text  # type: ignore[no-untyped-call]


def test_a_process_listening_sockets_are_found() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        table = _listen_table()  # type: ignore[no-untyped-call]
        assert f"127.0.0.1:{port}" in _listens_on(os.getpid(), table)  # type: ignore[no-untyped-call]


def _package(root: Path) -> Path:
    """sglang/__init__.py that refuses to be imported, srt/ a namespace package, the model."""
    (root / "sglang" / "srt" / "models").mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("raise SystemExit('sglang was imported')\n")
    model = root / "sglang" / "srt" / "models" / "kimi_k25.py"
    model.write_text("raise SystemExit('the model was imported')\n")
    return model


def test_modules_are_found_where_the_interpreter_would_load_them(tmp_path: Path) -> None:
    """Without running any package's code (both would exit): a pip-installed copy first on
    the path wins over the edited checkout, and both paths are reported."""
    site, checkout = _package(tmp_path / "site"), _package(tmp_path / "checkout")
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{tmp_path / 'checkout'}", "PATH": os.environ["PATH"]}
    module = "sglang.srt.models.kimi_k25"
    (wrong,) = resolve_imports({module: str(checkout)}, sys.executable, env, str(tmp_path))  # type: ignore[no-untyped-call]
    assert not wrong["ok"] and wrong["origin_real"] == str(site.resolve())
    assert wrong["expected_real"] == str(checkout.resolve())
    env["PYTHONPATH"] = str(tmp_path / "checkout")
    (right,) = resolve_imports({module: str(checkout)}, sys.executable, env, "/")  # type: ignore[no-untyped-call]
    assert right["ok"], right
    (missing,) = resolve_imports({"nope.x": str(checkout)}, sys.executable, env, "/")  # type: ignore[no-untyped-call]
    assert not missing["ok"] and missing["error"] == "No module named 'nope'"
