"""Checks sent with the commit (issue 17): the host writes the end record only if they passed.

The real lock script, session loop and file helper on a `LocalHost` (`tests.unit.local_rig`):
a ``CHECK`` that fails makes the host skip what was sent after it, as a failed write does,
until the client has seen it; the engine waits once for the writes, the checks and the commit,
and a check that failed on the host is rolled back exactly as one it had waited for.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from deploy.errors import HostUnreachable
from deploy.remote import session as session_module
from deploy.remote.lock import acquire
from tests.unit.local_host import LocalHost
from tests.unit.local_rig import LocalRig

REPO = Path(__file__).resolve().parents[2]
KIMI = REPO / "playbooks" / "kimi-eagle3.yaml"
FILES_ONLY = {"skip_tags": ["service"]}
CLASS = "KimiK25ForConditionalGeneration"


def test_a_failed_check_skips_what_follows_until_the_client_saw_it(
    locked: LocalHost, private: Path
) -> None:
    journal = private / "journal"
    check = locked.send_check("echo why >&2; exit 3", timeout=10)
    after = locked.send_check("touch ran", timeout=10)
    record = locked.append_file(str(journal), b"end\n", durable=True)
    assert check is not None and after is not None and record is not None
    waits = locked.ops["wait"]
    locked.flush()  # a failed check raises nothing: its sender judges it
    assert locked.ops["wait"] == waits + 1, "one wait for the three"
    assert check.failed_check and check.answer is not None
    assert check.answer["status"] == 3 and check.answer["stderr"] == "why\n"
    assert after.skipped and record.skipped
    assert not journal.exists() and not (private / "ran").exists()
    # The failure was cleared once seen: the session serves requests and commands again.
    again = locked.append_file(str(journal), b"rollback\n", durable=True)
    assert locked.run("echo served").stdout == "served\n"
    assert again is not None and again.ok and journal.read_bytes() == b"rollback\n"


def test_a_passed_check_lets_the_record_behind_it_be_written(
    locked: LocalHost, private: Path
) -> None:
    journal = private / "journal"
    check = locked.send_check("printf out", timeout=10)
    record = locked.append_file(str(journal), b"end\n", durable=True)
    locked.flush()
    assert check is not None and record is not None
    assert not check.failed_check and check.payload == b"out" and record.ok
    # A check is a shell command whose stdout is its payload: what `deploy.engine.verdicts`
    # hands the step's ``explain`` (no other kind of check exists since 5d5af98).
    assert check.command
    assert journal.read_bytes() == b"end\n"


def test_a_compile_check_sent_as_a_check_skips_what_follows_when_it_fails(
    private: Path,
) -> None:
    """The cached compile check, sent with the commit after one sent ahead with the lock: its
    failure must stop the commit, and be cleared once seen."""
    from deploy.checks.compile import compile_command

    bad, good, journal = private / "bad.py", private / "good.py", private / "journal"
    bad.write_bytes(b"def f(:\n")
    good.write_bytes(b"x = 1\n")
    cache = str(private / "state" / "compiled")
    python = os.path.realpath(sys.executable)
    ahead = compile_command(python, str(good), cache=cache)
    with LocalHost("local", home=str(private)) as host:
        lock = acquire(host, str(private / "state"), {"run_id": "t"}, speculate=[ahead])
        try:
            check = host.send_check(compile_command(python, str(bad), cache=cache), timeout=10)
            record = host.append_file(str(journal), b"end\n", durable=True)
            later = host.send_check("touch ran", timeout=10)
            assert check is not None and record is not None and later is not None
            host.flush()
            assert check.command and check.failed_check and check.answer is not None
            assert check.answer["status"] == 1 and "SyntaxError" in check.answer["stderr"]
            assert record.skipped and later.skipped
            assert not journal.exists() and not (private / "ran").exists()
            # Cleared once seen; a passing one lets the record behind it through.
            passed = host.send_check(compile_command(python, str(good), cache=cache), timeout=10)
            again = host.append_file(str(journal), b"end\n", durable=True)
            host.flush()
            assert passed is not None and not passed.failed_check and passed.answer is not None
            assert passed.answer["status"] == 0 and again is not None and again.ok
            assert journal.read_bytes() == b"end\n"
        finally:
            lock.release()


def _older_python(rig: LocalRig) -> Path:
    """An interpreter that rejects the file, as an older Python rejects newer syntax: only
    the host's compile can find it (the client's own ``ast`` accepts the file)."""
    python = rig.files / "python3.6"
    python.write_text(
        "#!/bin/sh\necho 'SyntaxError: invalid syntax (kimi_k25.py, line 12)' >&2\nexit 1\n"
    )
    os.chmod(python, 0o755)
    return python


def test_the_change_run_waits_once_after_the_lock_and_commits(rig: LocalRig, kimi: Path) -> None:
    run = rig.apply(KIMI, **FILES_ONLY)
    assert run.exit_code == 0, run.hosts[0].error
    (host,) = run.hosts
    assert host.ops["wait"] == 2, host.ops  # the lock's answer, then the batch
    (run_id,) = rig.runs()
    assert rig.events(run_id) == ["begin", "backup", "intent", "done", "end"]
    verify = next(s for s in host.steps if s.kind == "verify_python")
    assert verify.status == "ok" and verify.summary.endswith(
        "compiles with " + sys.executable + ": ok"
    )


def test_a_compile_failing_on_the_host_is_not_committed_and_is_rolled_back(
    rig: LocalRig, kimi: Path
) -> None:
    before = kimi.read_bytes()
    rig.write_inventory(sglang_python=str(_older_python(rig)))
    run = rig.apply(KIMI, **FILES_ONLY)
    assert run.exit_code == 1, run.hosts[0].error
    (host,) = run.hosts
    assert host.outcome == "rolled back"
    statuses = {s.kind: s.status for s in host.steps}
    assert statuses == {
        "backup": "ok",
        "python_insert": "changed",
        "verify_python": "failed",
        "verify_tail": "ok",  # judged on the bytes written, before the verdict came
    }, statuses
    assert host.failed_step == 2
    assert host.error is not None and "does not compile with" in host.error
    assert "SyntaxError: invalid syntax (kimi_k25.py, line 12)" in host.error
    assert kimi.read_bytes() == before
    (run_id,) = rig.runs()
    journal = rig.journal(run_id)
    # No commit: the end record sent behind the check was skipped by the host; the only end
    # is the rollback's, and the records' sequence has no gap where the skipped one was.
    assert [e["event"] for e in journal] == [
        "begin", "backup", "intent", "done", "rollback_begin", "undone", "end",
    ]  # fmt: skip
    assert journal[-1]["outcome"] == "rolled_back"
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert not (rig.state_dir / "runs" / run_id / "manifest.json").exists()


def test_a_playbooks_command_is_waited_for_before_the_commit(rig: LocalRig, kimi: Path) -> None:
    """Even judged by its exit status alone, a verify_command is waited for where it runs and
    the commit follows it: a cancel while it runs must still roll back (deploy.engine.verdicts)."""
    playbook = rig.playbook(
        "commanded",
        [
            {"append": {"path": str(kimi), "text": "# patched\n"}},
            {"verify_command": {"run": f"grep -q patched {kimi}"}},
            {"verify_tail": {"path": str(kimi), "last_line": "# patched"}},
        ],
    )
    run = rig.apply(playbook)
    assert run.exit_code == 0, run.hosts[0].error
    assert run.hosts[0].ops["wait"] == 3, run.hosts[0].ops  # lock, the command, the commit
    (run_id,) = rig.runs()
    assert json.loads((rig.state_dir / "runs" / run_id / "manifest.json").read_text())["files"]


def test_a_rerun_whose_compile_record_is_gone_checks_once_and_changes_nothing(
    rig: LocalRig, kimi: Path
) -> None:
    """Nothing changed, so nothing to commit: the check sent with the (empty) commit is still
    waited for and judged before the run reports."""
    assert rig.apply(KIMI, **FILES_ONLY).exit_code == 0
    for record in (rig.state_dir / "compiled").iterdir():
        record.unlink()
    again = rig.apply(KIMI, **FILES_ONLY)
    assert again.exit_code == 0, again.hosts[0].error
    (host,) = again.hosts
    assert host.outcome == "unchanged" and host.ops["wait"] == 2, host.ops
    verify = next(s for s in host.steps if s.kind == "verify_python")
    assert verify.status == "ok" and verify.summary.endswith(": ok"), verify.summary
    assert len(rig.runs()) == 1, "a run that changes nothing leaves no run behind"
    assert [p.name for p in (rig.state_dir / "compiled").iterdir()], "the pass was recorded"


def test_a_later_local_failure_still_names_the_earlier_failed_check(
    rig: LocalRig, kimi: Path
) -> None:
    """verify_tail fails on the client while the compile sent before it is unanswered: the run
    waits for that answer first, and the first step that failed is the one named."""
    before = kimi.read_bytes()
    python = _older_python(rig)
    playbook = rig.playbook(
        "both-fail",
        [
            {"append": {"path": str(kimi), "text": "# patched\n"}},
            {"verify_python": {"path": str(kimi), "python": str(python), "compiles": True}},
            {"verify_tail": {"path": str(kimi), "last_line": "not the last line"}},
        ],
    )
    run = rig.apply(playbook)
    assert run.exit_code == 1
    (host,) = run.hosts
    assert [s.status for s in host.steps] == ["changed", "failed", "failed"]
    assert host.outcome == "rolled back" and host.failed_step == 1
    assert host.error is not None and host.error.startswith("step 2 failed: ")
    assert "does not compile" in host.error
    assert kimi.read_bytes() == before


def _path_without_timeout(directory: Path) -> str:
    """A PATH with every command of this machine but timeout(1), as on a host without it."""
    directory.mkdir()
    for source in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in sorted(os.listdir(source)):
            if name != "timeout" and not (directory / name).exists():
                (directory / name).symlink_to(os.path.join(source, name))
    return str(directory)


def test_a_check_on_a_host_without_timeout_is_still_bounded_by_the_client(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without timeout(1) the host cannot stop a check at its limit (deploy.remote.session):
    the client must, as it does for a command it waits for — not wait for as long as the
    check runs, nor let a check that overran its limit commit the record sent behind it."""
    monkeypatch.setattr(session_module, "GRACE", 1.0)  # the margin only; the wait is real
    env = {"PATH": _path_without_timeout(private / "bin")}
    journal = private / "journal"
    with LocalHost("local", home=str(private), env=env) as host:
        lock = acquire(host, str(private / "state"), {"run_id": "t"})
        try:
            check = host.send_check("sleep 20", timeout=1)
            record = host.append_file(str(journal), b"end\n", durable=True)
            assert check is not None and record is not None
            began = time.monotonic()
            with pytest.raises(HostUnreachable):
                host.flush()
            waited = time.monotonic() - began
        finally:
            lock.release()
    assert waited < 10, f"waited {waited:.1f} s for a check limited to 1 s"
    assert not record.ok, "the client never saw the record written"


def test_what_the_lock_shell_writes_to_its_stderr_never_makes_waits_spin(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever reaches the lock channel's stderr (here the helper's own: a warning of the
    host's Python, a traceback) must be read away by the session, or the channel's pipe stays
    readable and every later wait spins in select."""
    from deploy.remote import lock as lockmod

    noisy = "import sys\nsys.stderr.write('noise\\n')\nsys.stderr.flush()\n"
    monkeypatch.setattr(lockmod, "HELPER_SOURCE", noisy + lockmod.HELPER_SOURCE)
    with LocalHost("local", home=str(private)) as host:
        lock = acquire(host, str(private / "state"), {"run_id": "t"})
        try:
            assert host.run("echo served").stdout == "served\n"
            record = host.append_file(str(private / "journal"), b"end\n", durable=True)
            host.flush()
            assert record is not None and record.ok, "the helper serves"
            assert host.session is not None
            assert not host.session.channel.recv_stderr_ready(), "nothing left unread"
        finally:
            lock.release()
