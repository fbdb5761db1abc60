"""Writes that send only what changed (`WriteOptions` ``known``): an edit in place, a saved
copy of a file the host has, an undo putting the original back.

The file helper puts the new file together from the head and tail of a file it has, around
the stretch the client sent, and writes it only if that file still hashes to what the client
knew and the result to what it meant. These run the real helper in a real lock's session on
this machine (`tests.unit.local_host`); the saved copy and the undo go through the engine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deploy import ablation
from deploy.errors import StepFailed
from deploy.remote.hostfiles import shared_ends
from tests.unit.local_host import LocalHost
from tests.unit.local_rig import LocalRig

KIMI = Path(__file__).resolve().parents[2] / "playbooks" / "kimi-eagle3.yaml"


@given(st.binary(max_size=9000), st.binary(max_size=300), st.data())
def test_shared_ends_are_the_longest_head_then_tail(
    before: bytes, insert: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(before)))
    gone = data.draw(st.integers(cut, len(before)))
    after = before[:cut] + insert + before[gone:]
    head, tail = shared_ends(before, after)
    assert head + tail <= min(len(before), len(after))
    assert before[:head] == after[:head]
    assert before[len(before) - tail :] == after[len(after) - tail :]
    # The longest head: the next byte differs (or one side ends there).
    assert head == min(len(before), len(after)) or before[head] != after[head]
    # The longest tail that leaves the head alone.
    room = min(len(before), len(after)) - head
    assert tail == room or before[len(before) - tail - 1] != after[len(after) - tail - 1]


def _sent(host: LocalHost) -> int:
    return host.ops.get("sent", 0)


def test_an_edit_in_place_sends_only_the_stretch_it_changed(
    locked: LocalHost, private: Path, kimi_source: Callable[[str], bytes]
) -> None:
    target = private / "kimi_k25.py"
    old = kimi_source("0.5.9")
    target.write_bytes(old)
    cut = old.index(b"\nEntryClass")
    new = old[:cut] + b"\n    def added(self):\n        return 1\n" + old[cut:]
    before = _sent(locked)
    locked.write_atomic(
        str(target), new, expect_sha256=hashlib.sha256(old).hexdigest(), known=(str(target), old)
    )
    locked.flush()
    assert target.read_bytes() == new
    assert _sent(locked) - before < 1000, "the whole file went, not the stretch"


def test_the_benchs_switch_sends_whole_files(
    locked: LocalHost, private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DEPLOY_ABLATE=splice`` (`python -m bench --ablate`): the same write, every byte sent."""
    monkeypatch.setattr(ablation, "OFF", frozenset({"splice"}))
    target = private / "app.conf"
    old = b"x = 1\n" * 2000
    target.write_bytes(old)
    before = _sent(locked)
    locked.write_atomic(str(target), old + b"y = 2\n", known=(str(target), old))
    locked.flush()
    assert target.read_bytes() == old + b"y = 2\n"
    assert _sent(locked) - before > len(old)


def test_the_saved_copy_of_a_file_the_host_has_is_made_there(
    locked: LocalHost, private: Path
) -> None:
    source = private / "app.conf"
    content = b"port = 80\n" * 3000
    source.write_bytes(content)
    copy = private / "copy"
    before = _sent(locked)
    locked.write_atomic(str(copy), content, mode=0o600, known=(str(source), content))
    locked.flush()
    assert copy.read_bytes() == content
    assert copy.stat().st_mode & 0o777 == 0o600
    assert _sent(locked) - before < 1000


def test_a_known_file_that_changed_on_the_host_is_not_written_from(
    locked: LocalHost, private: Path
) -> None:
    """The client's idea of the file is stale (someone edited it since the read): the bytes
    put together from it would be neither the original nor what the run meant."""
    target = private / "app.conf"
    seen = b"a = 1\nb = 2\n" * 500
    target.write_bytes(seen.replace(b"b = 2", b"b = 3", 1))  # someone else's edit
    with pytest.raises(StepFailed, match="changed on the host"):
        locked.write_atomic(
            str(target), seen.replace(b"a = 1", b"a = 9", 1), known=(str(target), seen)
        )
        locked.flush()
    assert target.read_bytes() == seen.replace(b"b = 2", b"b = 3", 1)
    assert [p.name for p in private.iterdir() if p.name.endswith(".tmp")] == []


def test_a_run_that_changes_a_large_file_sends_what_it_changed(rig: LocalRig, kimi: Path) -> None:
    """kimi-eagle3 on the real kimi_k25.py grown to ~290 kB (a licence-sized comment block in
    front): the saved copy is made on the host from its own file and the edit sends the
    inserted methods, so the run sends the same ~20 kB of requests (records, the compile
    checks' programs) it sends for the 28 kB file, not the file twice. The copy and the file
    are byte for byte what whole-file writes would have left, and the rollback that puts
    the original back sends only the stretch the run changed."""
    original = b"# licence text, kept as it is\n" * 8800 + kimi.read_bytes()
    kimi.write_bytes(original)
    result = rig.apply(KIMI, skip_tags=["service"])
    host = result.hosts[0]
    assert host.outcome == "changed", host
    assert host.ops["sent"] < 64 * 1024, host.ops
    patched = kimi.read_bytes()
    assert patched.startswith(b"# licence text, kept as it is\n" * 8800)
    assert patched.count(b"def set_eagle3_layers_to_capture") == 1
    assert len(patched) > len(original)
    copies = list(rig.state_dir.glob("runs/*/files/*"))
    assert [c.read_bytes() for c in copies] == [original]
    assert copies[0].name == hashlib.sha256(original).hexdigest()

    assert result.run_id is not None
    undone = rig.rollback(result.run_id)
    assert undone.hosts[0].outcome == "restored", undone.hosts[0]
    assert kimi.read_bytes() == original
    assert undone.hosts[0].ops["sent"] < 16 * 1024, undone.hosts[0].ops


def test_a_backup_of_a_file_a_command_rewrote_saves_the_original(rig: LocalRig) -> None:
    """``backup`` is for a file the playbook changes by other means (a command); its copy is
    saved at the run's first change, which may come after that command. The host's file is
    then no longer the original the run read, so the copy cannot be made from it: the run
    sends the original it holds, and the copy is that original, not a refusal that fails the
    run (nor the rewritten file)."""
    env = rig.files / "server.env"
    env.write_bytes(b"PORT=80\n" * 2000)
    conf = rig.files / "app.conf"
    conf.write_bytes(b"a = 1\n")
    playbook = rig.playbook(
        "rewrite",
        [
            {"backup": {"path": str(env)}},
            {"verify_command": {"run": f"printf 'PORT=81\\n' > {env}"}},
            {"append": {"path": str(conf), "text": "b = 2\n"}},
        ],
    )
    result = rig.apply(playbook)
    host = result.hosts[0]
    assert host.outcome == "changed", host.error
    assert env.read_bytes() == b"PORT=81\n"
    assert conf.read_bytes() == b"a = 1\nb = 2\n"
    copies = sorted(c.read_bytes() for c in rig.state_dir.glob("runs/*/files/*"))
    assert copies == sorted([b"PORT=80\n" * 2000, b"a = 1\n"])


def test_a_backup_of_a_file_this_run_created_does_not_fail_the_run(rig: LocalRig) -> None:
    """A file this run created has no original on the host (the run holds it as empty): its
    saved copy is not made from the file, which holds what the run wrote."""
    made = rig.files / "made.env"
    conf = rig.files / "app.conf"
    conf.write_bytes(b"a = 1\n")
    playbook = rig.playbook(
        "created",
        [
            {"copy": {"content": "X=1\n", "dest": str(made)}},
            {"backup": {"path": str(made)}},
            {"append": {"path": str(conf), "text": "b = 2\n"}},
        ],
    )
    host = rig.apply(playbook).hosts[0]
    assert host.outcome == "changed", host.error
    assert made.read_bytes() == b"X=1\n"
    assert conf.read_bytes() == b"a = 1\nb = 2\n"


def test_the_backup_of_a_file_a_command_rewrote_before_its_edit_is_kept(rig: LocalRig) -> None:
    """``backup``, a command that rewrites the file, then an edit of it: the edit, computed on
    the file as read, is refused (the file changed since), and the run is rolled back; the
    command's change is not deploy's to undo, so the copy of the original the backup step
    promised is what the operator has left to put it back with, and must be there."""
    env = rig.files / "server.env"
    original = b"PORT=80\n" * 2000
    env.write_bytes(original)
    playbook = rig.playbook(
        "rewrite-then-edit",
        [
            {"backup": {"path": str(env)}},
            {"verify_command": {"run": f"printf 'PORT=81\\n' > {env}"}},
            {"append": {"path": str(env), "text": "Z=1\n"}},
        ],
    )
    host = rig.apply(playbook).hosts[0]
    assert host.outcome == "rolled back", host
    assert "changed on the host" in str(host.error)
    assert env.read_bytes() == b"PORT=81\n"
    copies = [c.read_bytes() for c in rig.state_dir.glob("runs/*/files/*")]
    assert copies == [original]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"", b"x\n"),  # an empty file: nothing shared, the whole of the new sent
        (b"x\n", b""),  # emptied: nothing sent at all
        (b"x", b"y"),  # one byte
        (b"a = 1\nb = 2\n", b"a = 1\n"),  # shorter: the tail dropped
        (b"ab", b"abab"),  # the new bytes repeat the old: head and tail must not overlap
        (b"same\n", b"same\n"),  # the bytes kept (a write for the mode alone)
    ],
)
def test_edges_of_a_spliced_write(locked: LocalHost, private: Path, old: bytes, new: bytes) -> None:
    target = private / "edge"
    target.write_bytes(old)
    locked.write_atomic(
        str(target), new, expect_sha256=hashlib.sha256(old).hexdigest(), known=(str(target), old)
    )
    locked.flush()
    assert target.read_bytes() == new


@pytest.mark.parametrize("someone", ["edited", "removed"])
def test_a_forced_rollback_over_someones_change_puts_the_original_back(
    rig: LocalRig, kimi: Path, someone: str
) -> None:
    """The undo splices from what it just read: someone's edit of the patched file (the
    ends it shares with the original come from it) or nothing at all (the file removed: the
    whole original sent). Refused without --force, byte for byte the original with it."""
    original = kimi.read_bytes()
    result = rig.apply(KIMI, skip_tags=["service"])
    assert result.hosts[0].outcome == "changed", result.hosts[0].error
    assert result.run_id is not None
    if someone == "edited":
        kimi.write_bytes(kimi.read_bytes().replace(b"import", b"import  ", 1) + b"# mine\n")
    else:
        kimi.unlink()
    refused = rig.rollback(result.run_id)
    assert refused.exit_code == 3, refused.hosts[0]
    assert "changed since deploy wrote it" in (refused.hosts[0].error or "")
    forced = rig.rollback(result.run_id, force=True)
    assert forced.hosts[0].outcome == "restored", forced.hosts[0].error
    assert kimi.read_bytes() == original
    assert kimi.stat().st_mode & 0o7777 == 0o640
