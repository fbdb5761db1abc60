"""Attacks on state_dir by a real unprivileged user (issue 14 item 2).

The attacker owns state_dir (or it is world-writable, sticky like /tmp) and plants two things
in it: a ``lock`` symlink to a root-only file (taking the lock would write root's holder line
through it), and an "unfinished run" whose saved copy is the attacker's bytes for a root-owned
file (recovering it would write them there as root). Root then runs an unrelated apply.

Success for the attacker: the root-only file changed, the root-owned file holds the planted
bytes, or root created anything in the attacker's directory. Expected: exit 4 "state_dir
untrusted" naming the path and its owner, and nothing read or written there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.attacker import (
    Attacker,
    attacker_dir,
    describe,
    record_attack,
    root_only_file,
)
from tests.faults.conftest import FILES_ONLY, FaultHost

#: Each attacker is a busy loop that keeps a core busy: under pytest-xdist the attacks run on
#: one worker, one after another, so that two of them never starve a 2-core machine at once.
pytestmark = pytest.mark.xdist_group("attacker")

TRIES = 3
SECONDS = 10.0
RACE_TRIES, RACE_SECONDS = 16, 60.0
EVIL = b"# the attacker's bytes, written by root\nimport os; os.system('id > /tmp/pwned')\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _real_run(host: FaultHost) -> Path:
    """A genuine run directory, from a normal apply in the host's own (trusted) state_dir."""
    result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert result.exit_code == 0, result.output
    runs = sorted((host.state_dir / "runs").iterdir())
    assert runs and host.file_state() == "after"
    return runs[-1]


def _plant(run: Path, state: Path, original: bytes, owner: Attacker) -> None:
    """Copy ``run`` into ``state`` as the attacker would forge it: unfinished, evil copy."""
    forged = state / "runs" / run.name
    shutil.copytree(run, forged)
    old, new = _sha(original), _sha(EVIL)
    for path in forged.rglob("*"):
        if path.is_file() and path.parent.name != "files":
            lines = path.read_text().replace(old, new).splitlines()
            kept = [line for line in lines if '"event": "end"' not in line.replace('":"', '": "')]
            path.write_text("\n".join(kept) + "\n")
    files = forged / "files"
    if (files / old).exists():
        (files / old).unlink()
    files.mkdir(exist_ok=True)
    (files / new).write_bytes(EVIL)
    for path in [forged, *forged.rglob("*")]:
        os.lchown(path, owner.uid, owner.gid)


def _root_owned(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.lstat().st_uid == 0)


@pytest.mark.parametrize("shape", ["owned by the attacker", "world-writable sticky, root-owned"])
def test_planted_run_and_lock_symlink_in_untrusted_state_dir(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path, shape: str
) -> None:
    host: FaultHost = make_fault_host()
    real = _real_run(host)
    prize = root_only_file(arena / "root-only" / "shadow", b"root's secret, mode 0600\n")
    (arena / "root-only").chmod(0o711)
    prize_before = prize.read_bytes()
    tries = successes = 0
    left: set[str] = set()
    untrusted_said = True
    began = time.monotonic()
    while tries < TRIES and time.monotonic() - began < SECONDS:
        tries += 1
        parent = arena / f"try-{tries}"  # root-owned, 0711: only state_dir itself is at fault
        parent.mkdir(mode=0o711)
        state = parent / "state"
        if shape == "owned by the attacker":
            attacker_dir(attacker, state)
        else:
            state.mkdir()
            state.chmod(0o1777)
        (state / "runs").mkdir()
        os.chown(state / "runs", attacker.uid, attacker.gid)
        _plant(real, state, host.original, attacker)
        (state / "lock").symlink_to(prize)
        os.lchown(state / "lock", attacker.uid, attacker.gid)
        inventory = yaml.safe_load(host.inventory.read_text())
        inventory["hosts"]["gpu-1"]["state_dir"] = str(state)
        host.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))
        planted = {p.name for p in (state / "runs").iterdir()}
        result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
        won = (
            prize.read_bytes() != prize_before
            or host.model_file.read_bytes() == EVIL
            or bool(_root_owned(state))
        )
        successes += won
        left.update(_root_owned(state))
        if host.model_file.read_bytes() == EVIL:
            left.add("model file = attacker's bytes")
        if prize.read_bytes() != prize_before:
            left.add("root-only file overwritten")
        untrusted_said &= result.exit_code == 4 and "state_dir untrusted" in result.output
        untrusted_said &= str(state) in result.output and (
            attacker.name in result.output or shape != "owned by the attacker"
        )
        assert {p.name for p in (state / "runs").iterdir()} == planted
        prize.write_bytes(prize_before)
    record_attack(
        f"planted unfinished run + `lock` symlink, state_dir {shape}",
        tries,
        successes,
        ", ".join(sorted(left)) or f"nothing; exit 4 state_dir untrusted ({describe(prize)})",
    )
    assert successes == 0, left
    assert untrusted_said, result.output


#: Watch root's lock shell (its command line, which anyone may read, names STATE) and its
#: subshells; once one of them has run the ``stat`` that judges STATE while STATE is not there
#: and that ``stat`` has exited, rename the next planted directory into STATE's place (the
#: shell would create it next). Until DEADLINE or STATE.stop.
RACE_IN = r"""
import json, os, sys, time
state, plants, deadline = sys.argv[1], sys.argv[2].split(":"), float(sys.argv[3])
needle, judged = b"_dS=" + state.encode(), state.encode() + b"\0"


def cmdline(pid):
    try:
        with open("/proc/" + pid + "/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


seen, moves, late, stats = set(), 0, 0, 0
while time.time() < deadline and plants and not os.path.exists(state + ".stop"):
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in seen:
            continue
        cmd = cmdline(pid)
        if not cmd or cmd.startswith(b"sshd") or needle in cmd:
            continue  # not exec'd yet, or root's shell and its forks: look again
        seen.add(pid)
        if not cmd.startswith(b"stat\0") or judged not in cmd or os.path.lexists(state):
            continue
        stats += 1
        while os.path.exists("/proc/" + pid + "/cmdline"):
            pass  # the judgement is made once that stat has exited
        try:
            if os.path.lexists(state):
                raise FileExistsError
            os.rename(plants[0], state)
        except OSError:
            late += 1
            continue
        plants.pop(0)
        moves += 1
print(json.dumps({"stats seen": stats, "moves": moves, "late": late}))
"""


def test_a_planted_dir_renamed_in_while_state_dir_is_created(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, arena: Path
) -> None:
    """Issue 32 point 3: state_dir under a sticky world-writable directory, not there yet.
    The attacker waits for root's lock shell to judge the absent path, then renames a
    planted state_dir (a forged unfinished run, its saved copy the attacker's bytes) into
    place before the shell creates it. Success for the attacker: root took the lock in the
    planted directory, or recovered the forged run into the model file. (Before the fix, on
    this machine: 2 successes in 11 tries, one run ending exit 3 on the forged run.)"""
    host: FaultHost = make_fault_host()
    real = _real_run(host)
    sticky = arena / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    state = sticky / "state"
    plants = []
    for n in range(RACE_TRIES + 2):
        plant = sticky / f".plant-{n}"
        attacker_dir(attacker, plant, 0o755)
        (plant / "runs").mkdir()
        _plant(real, plant, host.original, attacker)
        for path in [plant, *plant.rglob("*")]:
            os.lchown(path, attacker.uid, attacker.gid)
        plants.append(str(plant))
    inventory = yaml.safe_load(host.inventory.read_text())
    inventory["hosts"]["gpu-1"]["state_dir"] = str(state)
    host.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))
    racer = attacker.python(RACE_IN, str(state), ":".join(plants), str(time.time() + 90))
    tries = successes = 0
    left: set[str] = set()
    exits: set[int] = set()
    began = time.monotonic()
    try:
        while tries < RACE_TRIES and time.monotonic() - began < RACE_SECONDS:
            tries += 1
            result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
            exits.add(result.exit_code)
            theirs = state.exists() and state.lstat().st_uid == attacker.uid
            rooted = theirs and any(p.lstat().st_uid == 0 for p in state.rglob("*"))
            if rooted or host.model_file.read_bytes() == EVIL:
                successes += 1
                left.add("root wrote in the planted state_dir" if rooted else "model = EVIL")
            elif theirs:
                left.add("planted dir refused: state_dir untrusted")
            host.model_file.write_bytes(host.original)
            time.sleep(1.2)  # the attacker looks for root's lock in what it planted
            shutil.rmtree(state, ignore_errors=True)
    finally:
        (sticky / "state.stop").touch()
        try:
            out, _ = racer.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            racer.kill()
            out, _ = racer.communicate()
    record_attack(
        "planted state_dir renamed into place while root creates it (sticky parent)",
        tries,
        successes,
        (", ".join(sorted(left)) or "nothing")
        + f"; exits {sorted(exits)}; attacker: {out.strip()}",
    )
    assert successes == 0, left
