"""Faults of the host's environment: disk full, read-only filesystems, foreign edits, a second
run at the same moment, a changed or unknown host key.

Root ignores mode bits, so "permission denied" is made the way root also meets it: a
read-only bind mount. A full disk is a small tmpfs over the directory. Every mount is undone
in a ``finally`` (see `mounted`, `read_only`), whatever the test does.
"""

from __future__ import annotations

import json
import os
import time

from tests.faults.conftest import FILES_ONLY, LEDGER, FaultHost, Record, mounted, read_only, sha
from tests.faults.harness import lock_taken

PAGE = 4096


def _record(
    host: FaultHost,
    fault: str,
    point: str,
    fault_exit: int,
    next_exit: int,
    expect: str,
    **kw: object,
) -> Record:
    state = host.file_state()
    record = Record(
        fault=fault,
        point=point,
        next_command=str(kw.pop("next_command", "apply")),
        fault_exit=fault_exit,
        fault_outcome=str(kw.pop("fault_outcome", "")),
        next_exit=next_exit,
        file_state=state,
        service_state=host.service_state(),
        consistent=state == expect and not host.stray_files(),
        truthful=bool(kw.pop("truthful", True)),
        bytes_lost=host.bytes_lost(),
        note=str(kw.pop("note", "")),
    )
    LEDGER.add(record)
    return record


def _apply(host: FaultHost, *extra: str):  # type: ignore[no-untyped-def]
    return host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", *extra)


def test_disk_full_during_the_write(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    size = -(-len(host.original) // PAGE) * PAGE + PAGE  # the original fits; a second copy not
    with mounted(host.model_file.parent, "-o", f"size={size}"):
        full = _apply(host)
        assert full.exit_code == 1, full.output
        assert host.file_state() == "before" and not host.stray_files()
        assert "rolled back" in full.output or "failed" in full.output
    again = _apply(host)
    record = _record(
        host,
        "disk full",
        "during the write of the target",
        full.exit_code,
        again.exit_code,
        "after",
    )
    assert again.exit_code == 0 and record.consistent and record.bytes_lost == 0, again.output


def test_disk_full_during_the_backup(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    with mounted(host.state_dir, "-o", "size=12k"):
        full = _apply(host)
        assert full.exit_code in (1, 3), full.output
        assert host.file_state() == "before", "no change without a saved copy"
    again = _apply(host)
    record = _record(
        host,
        "disk full",
        "during the saved copy (state_dir)",
        full.exit_code,
        again.exit_code,
        "after",
        truthful=full.exit_code == 1,
    )
    assert again.exit_code == 0 and record.consistent, again.output
    assert record.truthful, full.output


def test_read_only_target(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    with read_only(host.model_file.parent):
        denied = _apply(host)
        assert denied.exit_code == 1, denied.output
        assert host.file_state() == "before"
    again = _apply(host)
    record = _record(
        host,
        "read-only filesystem",
        "the target's directory",
        denied.exit_code,
        again.exit_code,
        "after",
    )
    assert again.exit_code == 0 and record.consistent, again.output


def test_read_only_state_dir(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    (host.state_dir / "runs").mkdir(parents=True)
    with read_only(host.state_dir):
        denied = _apply(host)
        assert denied.exit_code == 1, denied.output
        assert "state_dir" in denied.output or "lock" in denied.output, denied.output
        assert host.file_state() == "before"
    again = _apply(host)
    record = _record(
        host, "read-only filesystem", "state_dir", denied.exit_code, again.exit_code, "after"
    )
    assert again.exit_code == 0 and record.consistent, again.output


def test_foreign_edit_between_read_and_write_keeps_size_and_mtime(
    make_fault_host,
) -> None:  # type: ignore[no-untyped-def]
    """An edit that keeps size and mtime (rsync -t, cp -p, an editor that restores them)."""
    host: FaultHost = make_fault_host()
    foreign = host.original.replace(b"Iterable, List", b"List, Iterable", 1)
    assert foreign != host.original and len(foreign) == len(host.original)
    stat = host.model_file.stat()

    def edit_behind_our_back() -> None:
        host.model_file.write_bytes(foreign)
        os.utime(host.model_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    # Freeze deploy at its first request after the lock's answer: the file was read (it came
    # with that answer), nothing written yet. Not at the journal's first line: writes and
    # records are sent without waiting, so by the time that line is on the host's disk the
    # write may already have passed the proxy (deploy/remote/hostfiles.py).
    host.old_runs = set(host.runs())
    host.armed_at = time.time()
    host.proxy.arm(lambda: lock_taken(host), action=edit_behind_our_back, cut=False)
    result = _apply(host)
    host.proxy.disarm()
    assert host.proxy.fired.is_set()
    kept = host.model_file.read_bytes() == foreign
    record = _record(
        host,
        "foreign edit",
        "between our read and our write (same size and mtime)",
        result.exit_code,
        result.exit_code,
        "other",
        next_command="-",
        truthful=result.exit_code == 1,
        note="" if kept else "the foreign edit was overwritten",
    )
    record.bytes_lost = 0 if kept else len(foreign)
    assert kept, f"deploy overwrote an edit made after its read:\n{result.output}"
    assert result.exit_code == 1, result.output
    # The copy the host was to make from the file was refused with the write (the file no
    # longer held what the run read): the run sent the original it read instead.
    assert host.bytes_lost() == 0, "the original the run read is in no saved copy"
    (run,) = set(host.runs()) - host.old_runs
    lines = (host.state_dir / "runs" / run / "journal.jsonl").read_text().splitlines()
    backups = [r for r in map(json.loads, lines) if r["event"] == "backup"]
    assert [r["sha256"] for r in backups] == [sha(host.original)], "no backup record for it"


def test_foreign_edit_between_apply_and_rollback_touches_nothing(
    make_fault_host,
) -> None:  # type: ignore[no-untyped-def]
    """A refused rollback must leave the host as it found it: new file edited, new server up."""
    host: FaultHost = make_fault_host(service=True)
    assert host.deploy("apply", "kimi-eagle3", "--yes").exit_code == 0
    assert host.service_state() == "new"
    edited = host.model_file.read_bytes() + b"# hot fix by an operator\n"
    host.model_file.write_bytes(edited)
    refused = host.deploy("rollback", "--yes")
    service = host.service_state()
    record = _record(
        host,
        "foreign edit",
        "between apply and rollback (service running)",
        0,
        refused.exit_code,
        "other",
        next_command="rollback",
        truthful=refused.exit_code == 3,
        note=f"service after the refused rollback: {service}",
    )
    record.consistent = host.model_file.read_bytes() == edited and service == "new"
    assert refused.exit_code == 3, refused.output
    assert host.model_file.read_bytes() == edited, "refused means the file is untouched"
    assert service == "new" and host.healthy(), "refused means the server is untouched too"


def test_two_runs_at_once(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    second: dict[str, object] = {}

    def run_the_other() -> None:
        """From another workstation (its own state home, so its own workstation lock)."""
        saved = os.environ["XDG_STATE_HOME"]
        os.environ["XDG_STATE_HOME"] = saved + "-other-workstation"
        try:
            second["result"] = _apply(host)
        finally:
            os.environ["XDG_STATE_HOME"] = saved

    # Freeze the first run at its first request after the lock's answer, while it holds the
    # lock. Not at the journal's second line: the run sends its writes, records, check and
    # commit in one batch, and sends nothing more before its answers (deploy/engine/verdicts.py).
    host.old_runs = set(host.runs())
    host.armed_at = time.time()
    host.proxy.arm(lambda: lock_taken(host), action=run_the_other, cut=False)
    first = _apply(host)
    host.proxy.disarm()
    other = second["result"]
    record = _record(
        host,
        "two runs at once",
        "second run while the first holds the lock",
        getattr(other, "exit_code", -1),
        first.exit_code,
        "after",
        next_command="(first run)",
        truthful=getattr(other, "exit_code", -1) == 4
        and "locked by" in getattr(other, "output", ""),
    )
    assert first.exit_code == 0, first.output
    assert record.truthful and record.consistent, getattr(other, "output", "")


def test_changed_and_unknown_host_key(make_fault_host, sshd_sandbox) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    impostor = sshd_sandbox.start("impostor")
    host.proxy.retarget(impostor.port)  # another sshd answers on the same address and port
    changed = _apply(host)
    assert changed.exit_code == 4 and "CHANGED" in changed.output, changed.output
    assert host.file_state() == "before" and not host.state_dir.exists()
    _record(
        host,
        "host key",
        "changed (another sshd on the address)",
        changed.exit_code,
        4,
        "before",
        next_command="-",
        truthful=True,
    )

    host.proxy.retarget(host.ssh.port)
    trusted = host.known_hosts.read_text()
    host.known_hosts.write_text("")
    unknown = _apply(host)
    assert unknown.exit_code == 4 and "not in" in unknown.output, unknown.output
    assert host.file_state() == "before" and not host.state_dir.exists()
    host.known_hosts.write_text(trusted)
    again = _apply(host)
    record = _record(host, "host key", "unknown", unknown.exit_code, again.exit_code, "after")
    assert again.exit_code == 0 and record.consistent, again.output
