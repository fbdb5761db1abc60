"""Writes and undo keep what makes a file more than its bytes, over real sshd (issue 14 item 1).

The target is a root-run binary's neighbour as an attacker would pick it: setuid and setgid,
owned by a service user, with a user xattr and a file capability. A change keeps all of it,
the automatic rollback and ``deploy rollback`` put all of it back, and a hard-linked target or
a directory others can write in is refused unless the step allows it, with the file untouched.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import Deploy, KimiHost

#: ``cap_net_bind_service=ep`` as the kernel stores it (VFS_CAP_REVISION_2).
CAP = bytes.fromhex("0100000200040000000000000000000000000000")
ORIGINAL = b"#!/bin/sh\necho hello\n"

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]


def _metadata(path: Path) -> tuple[int, int, int, bytes, bytes]:
    st = path.lstat()
    return (
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        os.getxattr(path, "user.origin"),
        os.getxattr(path, "security.capability"),
    )


def _target(directory: Path) -> Path:
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    path = directory / "tool"
    path.write_bytes(ORIGINAL)
    os.chown(path, 1234, 1234)
    path.chmod(0o6755)  # after the chown, which clears both bits
    os.setxattr(path, "user.origin", b"vendor")
    os.setxattr(path, "security.capability", CAP)
    return path


def _playbook(tmp_path: Path, name: str, steps: str) -> Path:
    playbook = tmp_path / f"{name}.yaml"
    playbook.write_text(f"name: {name}\nhosts: all\nsteps:\n{steps}")
    return playbook


def test_change_and_undo_keep_mode_owner_xattrs_and_capabilities(
    make_kimi_hosts: MakeHosts, tmp_path: Path
) -> None:
    (kimi,), deploy = make_kimi_hosts([None])
    path = _target(kimi.host.root / "bin")
    before = _metadata(path)
    assert before[:3] == (0o6755, 1234, 1234)
    append = f'  - append: {{path: {path}, text: "echo patched\\n"}}\n'

    failing = _playbook(tmp_path, "fails", append + "  - verify_command: {run: 'false'}\n")
    result = deploy("apply", str(failing), "--yes")
    assert result.exit_code == 1, result.output
    assert path.read_bytes() == ORIGINAL and _metadata(path) == before, "rolled back whole"

    good = _playbook(tmp_path, "good", append)
    result = deploy("apply", str(good), "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert path.read_bytes() == ORIGINAL + b"echo patched\n"
    assert _metadata(path) == before, "the change kept setuid, owner, xattrs, capability"
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["ops"]["sftp"] == 0, host["ops"]

    os.removexattr(path, "user.origin")  # drift undo must not carry over
    os.setxattr(path, "user.origin", b"vendor")
    result = deploy("rollback", "--yes")
    assert result.exit_code == 0, result.output
    assert path.read_bytes() == ORIGINAL and _metadata(path) == before


def test_hard_links_and_unsafe_directories_are_refused_unless_allowed(
    make_kimi_hosts: MakeHosts, tmp_path: Path
) -> None:
    (kimi,), deploy = make_kimi_hosts([None])
    linked = _target(kimi.host.root / "linked")
    os.link(linked, kimi.host.root / "linked" / "other-name")
    shared = kimi.host.root / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    loose = shared / "conf"
    loose.write_bytes(b"a\n")
    steps = (
        f'  - append: {{path: {linked}, text: "x\\n"}}\n'
        f'  - append: {{path: {loose}, text: "x\\n"}}\n'
    )
    result = deploy("apply", str(_playbook(tmp_path, "refused", steps)), "--yes")
    assert result.exit_code == 1, result.output
    assert "2 hard links" in result.output, result.output
    assert linked.read_bytes() == ORIGINAL and loose.read_bytes() == b"a\n"
    assert not [p for p in linked.parent.iterdir() if p.name.endswith(".tmp")]

    result = deploy("apply", str(_playbook(tmp_path, "loose", steps.split("\n", 1)[1])), "--yes")
    assert result.exit_code == 1 and "StrictModes" in result.output, result.output
    assert loose.read_bytes() == b"a\n"

    allowed = (
        f'  - append: {{path: {linked}, text: "x\\n", hardlinks: allow}}\n'
        f'  - append: {{path: {loose}, text: "x\\n", unsafe_dir: true}}\n'
    )
    result = deploy("apply", str(_playbook(tmp_path, "allowed", allowed)), "--yes")
    assert result.exit_code == 0, result.output
    assert linked.read_bytes() == ORIGINAL + b"x\n" and loose.read_bytes() == b"a\nx\n"
    assert (linked.parent / "other-name").read_bytes() == ORIGINAL, "the other name is kept"
