"""Attacks on the paths above a target, by a real unprivileged user (issue 32 point 4).

**Ancestor swapped for a symlink.** The target ``ML/conf/app.conf`` and its directory
``conf`` are root's, but ``ML`` above them is the attacker's: they may rename ``conf`` away
and put a symlink to a root-only directory in its place at any moment. That directory holds
a file of the same name and the same bytes (a stock config the attacker knows), so a write
that follows the swapped path passes every check on the file itself and edits root's other
file. A kernel lookup of the whole path follows the swap; a walk from ``/`` one component at
a time with ``O_NOFOLLOW`` sees the symlink, and the attacker's own directory above the
target is refused like an unsafe one.

Success for the attacker: the root-only file changed, or a run through ``unsafe_dir`` (which
allows a directory others may write) followed their symlink. Bounded: `TRIES` and `SECONDS`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.faults.attacker import Attacker, attacker_dir, describe, record_attack, root_only_file
from tests.faults.conftest import FaultHost
from tests.faults.test_attack_files import MODES, _append_playbook, _inventory, _label, _reason

pytestmark = pytest.mark.xdist_group("attacker")

SECONDS = 25.0
TRIES = 8
STOCK = b"listen 80\n"

#: Swap DIR/conf for a symlink to PRIZE_DIR and back, until DEADLINE.
SWAP_ANCESTOR = r"""
import json, os, sys, time
directory, prize_dir, deadline = sys.argv[1], sys.argv[2], float(sys.argv[3])
conf, aside, link = (os.path.join(directory, n) for n in ("conf", "conf.real", ".l"))
swaps = 0
while time.time() < deadline:
    try:
        os.rename(conf, aside)
        os.symlink(prize_dir, link)
        os.rename(link, conf)
        swaps += 1
        time.sleep(0.0005)
        os.unlink(conf)
        os.rename(aside, conf)
    except OSError:
        try:
            if not os.path.isdir(conf) or os.path.islink(conf):
                if os.path.lexists(conf):
                    os.unlink(conf)
                os.rename(aside, conf)
        except OSError:
            pass
print(json.dumps({"swaps": swaps}))
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_ancestor_swapped_for_a_symlink_redirects_no_write(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path, tmp_path: Path, mode: str
) -> None:
    host: FaultHost = make_fault_host()
    prize = root_only_file(arena / "root-only" / "app.conf", STOCK)
    (arena / "root-only").chmod(0o711)
    ml = attacker_dir(attacker, arena / "ml")
    conf = ml / "conf"
    conf.mkdir(mode=0o755)  # root's, inside the attacker's directory
    target = conf / "app.conf"
    target.write_bytes(STOCK)
    target.chmod(0o644)
    _inventory(host, target=str(target))
    book = _append_playbook(tmp_path, "# added by deploy", unsafe_dir=mode == "unsafe_dir")
    swapper = attacker.python(
        SWAP_ANCESTOR, str(ml), str(prize.parent), str(time.time() + SECONDS + 30)
    )
    began = time.monotonic()
    tries = successes = 0
    exits: set[int] = set()
    reasons: set[str] = set()
    try:
        while tries < TRIES and time.monotonic() - began < SECONDS:
            tries += 1
            applied = host.deploy("apply", str(book), "--yes")
            exits.add(applied.exit_code)
            reasons.update(_reason(applied.output))
            if applied.exit_code == 0:
                exits.add(host.deploy("rollback", "--yes").exit_code)
            if prize.read_bytes() != STOCK or prize.stat().st_mode & 0o777 != 0o600:
                successes += 1
                prize.write_bytes(STOCK)
                prize.chmod(0o600)
    finally:
        swapper.kill()
        swapper.communicate()
    record_attack(
        "ancestor directory swapped for a symlink to a root-only directory" + _label(mode),
        tries,
        successes,
        f"{describe(prize)}; apply/rollback exits {sorted(exits)}"
        + "".join(f"; {r}" for r in sorted(reasons)),
    )
    assert successes == 0


#: Read PATH as the attacker; print whether it worked.
READ = r"""
import json, sys
try:
    with open(sys.argv[1], "rb") as handle:
        handle.read()
    print(json.dumps({"read": True}))
except OSError:
    print(json.dumps({"read": False}))
"""


def _default_acl_granting(uid: int) -> bytes:
    """``default: user::rwx, user:UID:rw-, group::r-x, mask::rwx, other::---`` as stored."""
    import struct

    anyone = 0xFFFFFFFF
    entries = [(1, 7, anyone), (2, 6, uid), (4, 5, anyone), (0x10, 7, anyone), (0x20, 0, anyone)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_a_default_acl_never_opens_a_replaced_file(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path, tmp_path: Path
) -> None:
    """Issue 32 point 5: a 0640 root file without an ACL, in a root directory whose default
    ACL grants the attacker rw. The temp file of a write takes that default as its own ACL;
    kept, apply (or rollback) would hand the attacker the file. After each command the
    attacker tries to read it."""
    host: FaultHost = make_fault_host()
    conf = arena / "acl"
    conf.mkdir(mode=0o755)
    os.setxattr(conf, "system.posix_acl_default", _default_acl_granting(attacker.uid))
    target = conf / "secret.conf"
    target.write_bytes(b"token = root-only\n")
    target.chmod(0o640)
    os.removexattr(target, "system.posix_acl_access")  # as made by hand with umask: no ACL
    target.chmod(0o640)
    _inventory(host, target=str(target))
    book = _append_playbook(tmp_path, "# added by deploy")
    tries = successes = 0
    exits: list[int] = []
    for command in [("apply", str(book), "--yes"), ("rollback", "--yes")] * 2:
        tries += 1
        exits.append(host.deploy(*command).exit_code)
        if attacker.run(READ, str(target))["read"]:
            successes += 1
    acl = "system.posix_acl_access" in os.listxattr(target)
    record_attack(
        "directory default ACL granting the attacker rw, on a replaced 0640 file (apply, rollback)",
        tries,
        successes,
        f"{describe(target)}, {'an' if acl else 'no'} access ACL; exits {exits}",
    )
    assert exits == [0, 0, 0, 0] and successes == 0 and not acl
