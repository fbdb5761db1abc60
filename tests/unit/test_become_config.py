"""become's settings: where they come from (host > group > playbook) and how sudo is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.config.load import load_inventory, load_playbook, resolve, resolve_hosts
from deploy.errors import BecomeFailed
from deploy.remote.become import Become

INVENTORY = """\
hosts:
  own: {become: false, become_user: svc}
  grouped: {}
  plain: {}
groups:
  gpu: {hosts: [own, grouped], become: true, become_user: sglang}
"""


def settled(tmp_path: Path, playbook_become: bool) -> dict[str, tuple[bool | None, str | None]]:
    (tmp_path / "hosts.yaml").write_text(INVENTORY)
    (tmp_path / "pb.yaml").write_text(
        f"name: pb\nhosts: all\nbecome: {str(playbook_become).lower()}\n"
        "steps:\n  - append: {path: /f, text: x}\n"
    )
    plans = resolve(load_inventory(tmp_path / "hosts.yaml"), load_playbook(tmp_path / "pb.yaml"))
    return {p.name: (p.spec.become, p.spec.become_user) for p in plans}


def test_the_host_wins_then_its_group_then_the_playbook(tmp_path: Path) -> None:
    assert settled(tmp_path, False) == {
        "own": (False, "svc"),
        "grouped": (True, "sglang"),
        "plain": (False, "root"),
    }
    assert settled(tmp_path, True)["plain"] == (True, "root")
    assert settled(tmp_path, True)["own"] == (False, "svc")


def test_commands_without_a_playbook_use_host_and_group(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(INVENTORY)
    hosts = dict(resolve_hosts(load_inventory(tmp_path / "hosts.yaml")))
    assert (hosts["grouped"].become, hosts["grouped"].become_user) == (True, "sglang")
    assert (hosts["plain"].become, hosts["plain"].become_user) == (False, "root")


def test_the_password_is_never_on_the_command_line_and_nopasswd_never_waits() -> None:
    secret = "pa ss'word"
    line, marker, nonce = Become("gpu-1", "deploy", "root", secret).wrap("echo 'hi'")
    assert secret not in line and marker in line and nonce in line
    sudo = "POSIXLY_CORRECT=y && \\exec /usr/bin/sudo "  # issue 32: no function, no alias
    assert line.startswith(sudo + "-S -p ") and " -u root -- /bin/sh -c " in line
    bare, _, _ = Become("gpu-1", "deploy", "root").wrap("true")
    assert bare.startswith(sudo + "-n -H -u root -- "), "no password: sudo must not ask"


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("sudo: a password is required\n", "sudo asks for a password; pass -K"),
        ("Sorry, try again.\n", "the become password is wrong"),
        ("sudo: 3 incorrect password attempts\n", "the become password is wrong"),
        ("deploy is not in the sudoers file.\n", "deploy may not run commands as root"),
        ("sh: 1: sudo: not found\n", "sudo is not installed"),
        ("", "no message"),
    ],
)
def test_each_refusal_is_one_line(said: str, expected: str) -> None:
    refusal = Become("gpu-1", "deploy", "root", None).refusal(said)
    assert isinstance(refusal, BecomeFailed) and refusal.exit_code == 4
    assert expected in str(refusal) and "\n" not in str(refusal)
