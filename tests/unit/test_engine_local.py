"""The engine on a `LocalHost`: runs, automatic rollback, recovery, `deploy rollback`, re-runs.

Each test runs the real engine, lock script, session loop and file helper against files in a
private temporary directory (`tests.unit.local_rig`), and asserts what is on disk afterwards:
bytes, modes, journal records, exit codes.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.local_rig import LocalRig

REPO = Path(__file__).resolve().parents[2]
CLASS = "KimiK25ForConditionalGeneration"
EAGLE3 = {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def class_methods(source: bytes) -> tuple[set[str], set[str]]:
    """(methods of the kimi class, names defined at module level)."""
    tree = ast.parse(source)
    module = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS)
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}, module


KIMI = REPO / "playbooks" / "kimi-eagle3.yaml"
FILES_ONLY = {"skip_tags": ["service"]}


def test_kimi_playbook_patches_inside_the_class_then_a_rerun_changes_nothing(
    rig: LocalRig, kimi: Path
) -> None:
    original = kimi.read_bytes()
    run = rig.apply(KIMI, **FILES_ONLY)
    assert run.exit_code == 0, run.hosts[0].error
    (host,) = run.hosts
    assert host.outcome == "changed"
    members, module = class_methods(kimi.read_bytes())
    assert members >= EAGLE3 and not module & EAGLE3
    assert stat.S_IMODE(kimi.stat().st_mode) == 0o640, "mode kept by the atomic write"
    assert not [p for p in kimi.parent.iterdir() if p.name.endswith(".tmp")]
    (run_id,) = rig.runs()
    assert rig.events(run_id) == ["begin", "backup", "intent", "done", "end"]
    saved = rig.state_dir / "runs" / run_id / "files" / sha(original)
    assert saved.read_bytes() == original
    manifest = json.loads((rig.state_dir / "runs" / run_id / "manifest.json").read_text())
    assert manifest["files"][0]["sha256_after"] == sha(kimi.read_bytes())
    assert manifest["files"][0]["mode"] == 0o640
    # state_dir was created private by the lock's shell
    assert stat.S_IMODE(rig.state_dir.stat().st_mode) == 0o700

    patched = kimi.read_bytes()
    again = rig.apply(KIMI, **FILES_ONLY)
    assert again.exit_code == 0
    assert again.hosts[0].outcome == "unchanged"
    assert kimi.read_bytes() == patched
    assert rig.runs() == [run_id], "a run that changes nothing leaves no run behind"
    assert any("compile result reused" in s.summary for s in again.hosts[0].steps), (
        "the lock's speculative compile answered the re-run's check"
    )


def test_check_shows_the_diff_and_touches_nothing(rig: LocalRig, kimi: Path) -> None:
    before = kimi.read_bytes()
    run = rig.apply(KIMI, check=True, **FILES_ONLY)
    assert run.exit_code == 0
    assert run.hosts[0].outcome == "would change"
    diff = "".join(step.diff for step in run.hosts[0].steps)
    assert diff.count("+    def ") == 3
    assert kimi.read_bytes() == before
    assert not rig.state_dir.exists(), "--check creates no state on the host"


def test_a_failing_verify_rolls_back_bytes_and_mode(rig: LocalRig, kimi: Path) -> None:
    """The naive append compiles but puts the methods at module level: verify_python fails,
    and the engine puts the file back byte for byte, mode included, and journals it."""
    os.chmod(kimi, 0o604)
    before = kimi.read_bytes()
    run = rig.apply(REPO / "playbooks" / "kimi-eagle3-naive-append.yaml")
    assert run.exit_code == 1
    (host,) = run.hosts
    assert host.outcome == "rolled back"
    failed = [s for s in host.steps if s.status == "failed"]
    assert [s.kind for s in failed] == ["verify_python"]
    assert "module level" in failed[0].summary
    assert kimi.read_bytes() == before
    assert stat.S_IMODE(kimi.stat().st_mode) == 0o604
    (run_id,) = rig.runs()
    journal = rig.journal(run_id)
    events = [e["event"] for e in journal]
    assert events[:4] == ["begin", "backup", "intent", "done"]
    assert "undone" in events
    assert journal[-1]["event"] == "end" and journal[-1]["outcome"] == "rolled_back"
    undone = next(e for e in journal if e["event"] == "undone")
    assert undone["path"] == str(kimi)
    # A run already undone is left alone by `deploy rollback`.
    again = rig.rollback(run_id)
    assert again.exit_code == 0 and again.hosts[0].outcome == "nothing to do"
    assert kimi.read_bytes() == before


def _insert(name: str) -> dict[str, object]:
    return {
        "name": f"Add {name}",
        "python_insert": {
            "path": "{{ model_file }}",
            "class": CLASS,
            "where": "end",
            "code": f"def {name}(self):\n    return 1\n",
        },
    }


def test_rollback_undoes_one_run_and_refuses_an_older_one(rig: LocalRig, kimi: Path) -> None:
    original = kimi.read_bytes()
    first = rig.apply(rig.playbook("first", [_insert("first_method")]))
    assert first.exit_code == 0
    after_first = kimi.read_bytes()
    second = rig.apply(rig.playbook("second", [_insert("second_method")]))
    assert second.exit_code == 0
    after_second = kimi.read_bytes()
    assert after_second != after_first
    older, newer = first.run_id, second.run_id
    assert rig.runs() == sorted([older, newer])

    refused = rig.rollback(older)
    assert refused.exit_code == 3
    assert newer in (refused.hosts[0].error or "")
    assert kimi.read_bytes() == after_second, "a refused rollback touches nothing"
    assert rig.events(older)[-1] == "end", "and changes no run's state"

    undone = rig.rollback(newer)
    assert undone.exit_code == 0, undone.hosts[0].error
    assert undone.hosts[0].outcome == "restored"
    assert kimi.read_bytes() == after_first
    assert rig.events(newer)[-3:] == ["rollback_begin", "undone", "rollback_end"]
    assert stat.S_IMODE(kimi.stat().st_mode) == 0o640

    assert rig.rollback(older).exit_code == 0
    assert kimi.read_bytes() == original


def test_an_interrupted_run_is_recovered_by_the_next_apply(rig: LocalRig, kimi: Path) -> None:
    """A workstation killed mid-run (SIGKILL by its own host command) leaves a changed file and
    a journal without an end; the next apply undoes that run first, then applies."""
    original = kimi.read_bytes()
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from tests.unit.local_rig import LocalRig\n"
        "rig = LocalRig(Path(sys.argv[1]))\n"
        "rig.write_inventory(model_file=sys.argv[3])\n"
        "steps = [\n"
        "    {'python_insert': {'path': '{{ model_file }}', 'class': sys.argv[2],\n"
        "                       'code': 'def doomed(self):\\n    return 1\\n'}},\n"
        "    {'verify_command': {'run': f'kill -KILL {os.getpid()}'}},\n"
        "]\n"
        "rig.apply(rig.playbook('killed', steps))\n"
        "sys.exit('the run was not killed')\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(rig.root), CLASS, str(kimi)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    (dead,) = rig.runs()
    assert "end" not in rig.events(dead)
    assert b"def doomed" in kimi.read_bytes()
    _wait_for_lock(rig)
    status = rig.status()
    assert [r.run_id for r in status.unfinished] == [dead]
    assert status.lock == "stale", "free, and its holder died mid-run"

    run = rig.apply(rig.playbook("next", [_insert("next_method")]))
    assert run.exit_code == 0, run.hosts[0].error
    (host,) = run.hosts
    assert host.recovered and dead in host.recovered[0]
    content = kimi.read_bytes()
    assert b"def doomed" not in content and b"def next_method" in content
    assert content.startswith(original[: original.index(b"\n\nEntryClass")])
    assert "undone" in rig.events(dead)
    assert rig.journal(dead)[-1]["event"] in ("end", "rollback_end")
    after = rig.status()
    assert after.unfinished == [] and after.lock == "free"
    assert after.last_run is not None and after.last_run.run_id == run.run_id


def _wait_for_lock(rig: LocalRig, seconds: float = 10) -> None:
    """Until the dead run's lock shell has seen EOF and ended (its flock is then free)."""
    deadline = time.monotonic() + seconds
    lock = rig.state_dir / "lock"
    while True:
        with lock.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                fcntl.flock(handle, fcntl.LOCK_UN)
                return
        assert time.monotonic() < deadline, "the dead run's lock was never released"
        time.sleep(0.02)
