"""Attacks on the file operations by a real unprivileged user (issue 14 items 1 and 6).

- **Temp-file swap during a write.** The attacker can write in the target's directory (it is
  theirs) and gave the target mode 4755. While root's run writes the target, the attacker
  swaps deploy's temp file for a symlink to a root-owned binary: a chmod or chown by path
  lands on the binary (setuid root), a rename puts the symlink in place of the target.
- **Read redirection.** The attacker flips the target between a plain file and a symlink to
  a root-only file; a read that checks and then opens by path copies the root-only bytes
  into the plan's diff (and, applied, into the attacker's file).
- **Metadata loss** (no race; the file is root's, in a root-owned directory): setuid and
  setgid bits, a user xattr, ``security.capability`` and a second hard link must survive an
  edit and its rollback, or the edit must be refused.

Each attack loops for at most `SECONDS` and `TRIES`; its row in docs/reliability.md says
tries, successes and what it left on the host. These pass only with fd-based file
operations (branch ``fileops``): on older code they fail and their records say how often
the attacker won.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from deploy.steps.append import AppendArgs
from tests.faults.attacker import Attacker, attacker_dir, describe, record_attack, root_only_file
from tests.faults.conftest import FaultHost

#: Each attacker is a busy loop that keeps a core busy: under pytest-xdist the attacks run on
#: one worker, one after another, so that two of them never starve a 2-core machine at once.
pytestmark = pytest.mark.xdist_group("attacker")

#: A deploy command takes 1-6 s on a loaded CI machine: 25 s gives 2-12 tries per attack.
SECONDS = 25.0
TRIES = 12

#: Swap every temp file deploy creates in DIR for a symlink to VICTIM, until DEADLINE.
SWAP = r"""
import json, os, sys, time
directory, victim, prefix, deadline = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
swaps = 0
while time.time() < deadline:
    try:
        names = os.listdir(directory)
    except OSError:
        continue
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            link = os.path.join(directory, ".evil-link")
            try:
                os.symlink(victim, link)
                os.rename(link, os.path.join(directory, name))
                swaps += 1
            except OSError:
                try:
                    os.unlink(link)
                except OSError:
                    pass
print(json.dumps({"swaps": swaps}))
"""

#: Flip TARGET between a plain file and a symlink to PRIZE, until DEADLINE.
FLIP = r"""
import json, os, sys, time
target, prize, content, deadline = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
directory = os.path.dirname(target)
flips = 0
while time.time() < deadline:
    link, plain = os.path.join(directory, ".l"), os.path.join(directory, ".p")
    try:
        os.symlink(prize, link)
        os.rename(link, target)
        with open(plain, "w") as out:
            out.write(content)
        os.rename(plain, target)
        flips += 1
    except OSError:
        pass
print(json.dumps({"flips": flips}))
"""


def _reason(output: str) -> list[str]:
    """Why deploy refused, if it said so (for the 'left on the host' column)."""
    keys = ("writable by", "hard link", "symlink", "is a symbolic link")
    for line in output.splitlines():
        if any(key in line for key in keys):
            text = re.sub(r"/tmp/deploy-attack-[^/ ]+", "ARENA", line.strip())
            return [text[:110] + ("..." if len(text) > 110 else "")]
    return []


def _inventory(host: FaultHost, **host_vars: str) -> None:
    import yaml

    inventory = yaml.safe_load(host.inventory.read_text())
    inventory["hosts"]["gpu-1"].setdefault("vars", {}).update(host_vars)
    host.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))


def _append_playbook(directory: Path, text: str, *, unsafe_dir: bool = False) -> Path:
    book = directory / "append.yaml"
    unsafe = ", unsafe_dir: true" if unsafe_dir else ""
    book.write_text(
        "name: attacked\nhosts: all\nsteps:\n"
        '  - name: Save\n    backup: {path: "{{ target }}"}\n'
        f'  - name: Append\n    append: {{path: "{{{{ target }}}}", text: "{text}\\n"{unsafe}}}\n'
    )
    return book


#: ``default``: the attacker's directory is refused outright (fileops' StrictModes rule).
#: ``unsafe_dir``: the step allows it, so the race is run against the fd-based write itself
#: (only where steps have the option: older code has no such field).
MODES = [
    "default",
    pytest.param(
        "unsafe_dir",
        marks=pytest.mark.skipif(
            "unsafe_dir" not in AppendArgs.model_fields, reason="steps have no unsafe_dir here"
        ),
    ),
]


@pytest.mark.parametrize("mode", MODES)
def test_temp_file_swap_during_a_write_gains_nothing(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path, tmp_path: Path, mode: str
) -> None:
    host: FaultHost = make_fault_host()
    victim = arena / "bin" / "victim"
    victim.parent.mkdir(mode=0o755)
    shutil.copyfile("/bin/true", victim)
    victim.chmod(0o755)
    original = victim.read_bytes()
    www = attacker_dir(attacker, arena / "www")
    target = www / "app.conf"
    target.write_text("listen 80\n")
    os.chown(target, attacker.uid, attacker.gid)
    target.chmod(0o4755)  # the mode the attacker wants on root's binary
    _inventory(host, target=str(target))
    book = _append_playbook(tmp_path, "# added by deploy", unsafe_dir=mode == "unsafe_dir")
    began = time.monotonic()
    swapper = attacker.python(
        SWAP, str(www), str(victim), ".app.conf.deploy-", str(time.time() + SECONDS + 30)
    )
    tries = successes = 0
    left: set[str] = set()
    exits: list[int] = []
    reasons: set[str] = set()
    try:
        while tries < TRIES and time.monotonic() - began < SECONDS:
            tries += 1
            applied = host.deploy("apply", str(book), "--yes")
            exits.append(applied.exit_code)
            exits.append(host.deploy("rollback", "--yes").exit_code)
            reasons.update(_reason(applied.output))
            info = victim.lstat()
            # The prize is root's binary: its mode, owner or bytes. The target's *name* is in
            # the attacker's own directory, where they may put anything at any time; it is
            # reported (with what deploy said about that run), not counted.
            won = bool(
                info.st_mode & (stat.S_ISUID | stat.S_ISGID)
                or info.st_uid != 0
                or victim.read_bytes() != original
            )
            if won:
                successes += 1
                left.add(describe(victim))
            if target.is_symlink():
                left.add(
                    "target name replaced by the attacker's symlink during the write "
                    f"(deploy said exit {exits[-2]})"
                )
                target.unlink()
                target.write_text("listen 80\n")
                os.chown(target, attacker.uid, attacker.gid)
            victim.chmod(0o755)
            os.chown(victim, 0, 0)
            victim.write_bytes(original)
    finally:
        swapper.kill()
        swapper.communicate()
    record_attack(
        "temp file swapped for a symlink during a write (setuid escalation)" + _label(mode),
        tries,
        successes,
        f"{describe(victim)}; apply/rollback exits {sorted(set(exits))}"
        + "".join(f"; {r}" for r in sorted(left | reasons)),
    )
    assert successes == 0, left


def _text_of(path: Path) -> str:
    """A regular file's text, read the way deploy must read: through one fd opened without
    following a symlink. "" for a symlink, or a name the flipper renamed away meanwhile.

    (Checking ``is_symlink()`` and then reading by path would race the flipper itself: this
    test runs as root, so it would read the root-only prize through a link swapped in between
    and count a leak deploy never made.)
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read().decode(errors="replace")
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", MODES)
def test_read_redirection_by_flipping_the_target_leaks_nothing(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path, tmp_path: Path, mode: str
) -> None:
    host: FaultHost = make_fault_host()
    marker = "ROOT-ONLY-9f3e2c"
    prize = root_only_file(arena / "root-only" / "secret", f"{marker}\n".encode() * 4)
    (arena / "root-only").chmod(0o711)
    www = attacker_dir(attacker, arena / "www")
    target = www / "app.conf"
    target.write_text("listen 80\n")
    os.chown(target, attacker.uid, attacker.gid)
    _inventory(host, target=str(target))
    book = _append_playbook(tmp_path, "# added by deploy", unsafe_dir=mode == "unsafe_dir")
    flipper = attacker.python(
        FLIP, str(target), str(prize), "listen 80\n", str(time.time() + SECONDS + 30)
    )
    began = time.monotonic()
    tries = successes = 0
    left: set[str] = set()
    reasons: set[str] = set()
    try:
        while tries < TRIES and time.monotonic() - began < SECONDS:
            tries += 1
            plan = host.deploy("apply", str(book), "--check", "--diff")
            applied = host.deploy("apply", str(book), "--yes")
            if applied.exit_code == 0:
                host.deploy("rollback", "--yes")
            reasons.update(_reason(plan.output) + _reason(applied.output))
            copied = any(marker in _text_of(p) for p in www.iterdir())
            if marker in plan.output or marker in applied.output or copied:
                successes += 1
                if copied:
                    left.add("root-only bytes in a file the attacker owns")
                if marker in plan.output:
                    left.add("root-only bytes in the plan's diff")
    finally:
        flipper.kill()
        flipper.communicate()
    record_attack(
        "read redirected by flipping the target file <-> symlink to a root-only file"
        + _label(mode),
        tries,
        successes,
        ", ".join(sorted(left)) or "nothing" + "".join(f"; {r}" for r in sorted(reasons)),
    )
    assert successes == 0, left


def _label(mode: str) -> str:
    return ", step with unsafe_dir: true" if mode == "unsafe_dir" else ""


def _xattrs(path: Path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path)}


def test_metadata_survives_an_edit_and_its_rollback(  # type: ignore[no-untyped-def]
    make_fault_host, arena: Path, tmp_path: Path
) -> None:
    """Mode bits and xattrs through apply and rollback; then a hard-linked target, whose
    edit must either keep the link or be refused (never split it silently)."""
    host: FaultHost = make_fault_host()
    meta = arena / "meta"
    meta.mkdir(mode=0o755)
    target = meta / "tool.conf"
    target.write_text("mode = strict\n")
    os.chown(target, 0, 0)
    target.chmod(0o6755)
    os.setxattr(target, "user.deploy-test", b"kept")
    subprocess.run(["setcap", "cap_net_bind_service+ep", str(target)], check=True)
    target.chmod(0o6755)  # setcap may clear set-id bits on some kernels: ask for them again
    wanted = (stat.S_IMODE(target.stat().st_mode), _xattrs(target))
    _inventory(host, target=str(target))
    book = _append_playbook(tmp_path, "# added by deploy")
    lost: list[str] = []
    said: list[str] = []
    tries = successes = 0
    commands = [("apply", str(book), "--yes"), ("rollback", "--yes"), ("apply", str(book), "--yes")]
    for number, command in enumerate(commands):
        tries += 1
        twin = meta / "tool-link.conf"
        if number == 2:  # the last try: the target gets a second name
            os.link(target, twin)
        result = host.deploy(*command)
        said.append(f"{command[0]} exit {result.exit_code}")
        info = target.stat()
        before = len(lost)
        if stat.S_IMODE(info.st_mode) != wanted[0]:
            lost.append(f"{command[0]}: mode {wanted[0]:04o} -> {stat.S_IMODE(info.st_mode):04o}")
        missing = sorted(set(wanted[1]) - set(_xattrs(target)))
        if missing:
            lost.append(f"{command[0]}: xattrs lost {', '.join(missing)}")
        if number == 2 and info.st_ino != twin.stat().st_ino:
            lost.append(f"{command[0]}: hard link split")
        if number == 2 and result.exit_code != 0 and "hard link" in result.output:
            said[-1] += " (hard-linked target refused)"
        successes += len(lost) > before
    record_attack(
        "metadata: setuid+setgid, user xattr, security.capability; then a hard link",
        tries,
        successes,
        "; ".join(lost) or f"all kept: {', '.join(said)}",
    )
    assert not lost, lost
    assert said[0] == "apply exit 0" and said[1] == "rollback exit 0", said
