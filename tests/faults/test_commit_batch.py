"""The commit sent behind the last host checks (issue 17): faults around that one batch.

A change run of kimi-eagle3 sends its writes, journal records, the compile check of the new
bytes (a ``CHECK``) and the commit (manifest, then the ``end`` record) without waiting, and
waits once. The host writes the ``end`` record only if everything before it succeeded
(`deploy.engine.verdicts`). Here the connection is cut right after that batch was sent — the
host's file helper stops as the ``end`` record's request reaches it, i.e. after the compile
check passed on the host and with nothing left to send — and the host either never writes the
record (the helper dies with the connection) or writes it after the cut (the helper goes on
with what it had received). Either way the host must end consistent: committed with the file
changed and checked, or an unfinished run that the next ``apply`` or ``rollback`` undoes.
And a compile that fails only on the host leaves no commit record and is rolled back, exit 1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.faults.conftest import FILES_ONLY, FaultHost
from tests.faults.harness import HelperStop, Outcome, helper_stop_armed, judge
from tests.faults.test_matrix_files import status_is_truthful

#: The end record is the fifth append to the run's journal (begin, backup, intent, done, end):
#: the last request of the batch, sent after the compile check.
END_RECORD = HelperStop("append", "{state_dir}/runs/*/journal.jsonl", nth=5)


def _journal(host: FaultHost) -> list[dict[str, Any]]:
    journals = sorted((host.state_dir / "runs").glob("*/journal.jsonl"))
    return [json.loads(line) for line in journals[-1].read_text().splitlines()]


@contextlib.contextmanager
def cut_at_end_record(host: FaultHost, then: str) -> Iterator[dict[str, Any]]:
    """Stop the helper as the end record's request reaches it, cut the connection at the
    proxy, then ``then``: "kill" the helper (the record is lost with the connection) or
    "resume" it (it appends what it had received, after the cut)."""

    def cut(seen: dict[str, Any]) -> dict[str, Any]:
        events = [e["event"] for e in _journal(host)]
        host.proxy.cut()
        os.kill(seen["pid"], signal.SIGKILL if then == "kill" else signal.SIGCONT)
        return {"events": events}

    with helper_stop_armed(host, END_RECORD, cut) as stopped:
        yield stopped


def _compiled(host: FaultHost) -> set[str]:
    """The sha256 of every file the host's compile check passed (state_dir/compiled)."""
    records = host.state_dir / "compiled"
    return {p.name for p in records.iterdir()} if records.is_dir() else set()


@pytest.mark.parametrize("then", ["kill", "resume"])
def test_cut_right_after_the_batch_leaves_the_host_consistent(make_fault_host, then: str) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    host.old_runs = set(host.runs())
    with cut_at_end_record(host, then) as stopped:
        process = host.deploy.popen("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json")
        out, err = process.communicate(timeout=120)
    assert stopped, f"the helper never received the end record:\n{out}{err}"
    # The whole batch had reached the host: the compile check had passed there (its record
    # names the new bytes) and the manifest was written; only the end record was left.
    assert stopped["events"] == ["begin", "backup", "intent", "done"], stopped
    assert host.file_state() == "after"
    assert _compiled(host) == {hashlib.sha256(host.patched).hexdigest()}
    # The client lost the connection before any answer: it cannot know whether the host
    # committed, and says so (a human must look, exit 3).
    assert process.returncode == 3, out + err
    assert "lost while the host committed: it either committed" in out + err, out + err

    if then == "resume":
        deadline = time.monotonic() + 20
        while _journal(host)[-1]["event"] != "end":
            assert time.monotonic() < deadline, "the resumed helper never appended the record"
            time.sleep(0.05)
        end = _journal(host)[-1]
        assert end["outcome"] == "ok", "committed after the cut, with its check passed"
        run_dir = host.state_dir / "runs" / host.runs()[-1]
        assert json.loads((run_dir / "manifest.json").read_text())["files"]
    else:
        assert _journal(host)[-1]["event"] == "done", "not committed: the record never landed"
    unfinished = then == "kill"
    truthful_status = status_is_truthful(host, unfinished)

    result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json")
    (report,) = json.loads(result.stdout)["hosts"]
    if unfinished:  # undone first, then applied again
        assert report["outcome"] == "changed" and report["recovered"], report
    else:  # committed: nothing to undo, nothing to change
        assert report["outcome"] == "unchanged" and not report["recovered"], report
    record = judge(
        host,
        "cut",
        f"after the commit batch was sent ({'end record lost' if unfinished else 'end record written after the cut'})",
        Outcome(process.returncode, "rollback failed", out + err, "after", "n/a", unfinished),
        "apply",
        Outcome(result.exit_code, report["outcome"], result.output),
        expect="after",
        status_truthful=truthful_status,
    )
    assert record.bytes_lost == 0
    assert record.consistent, f"{record}\n{result.output}"
    assert record.truthful, f"{record}\nfault run said:\n{out}{err}\nnext:\n{result.output}"


def test_a_compile_failing_on_the_host_is_never_committed(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    """The file parses for the client's ``ast`` but not for the host's interpreter (an older
    Python): the check fails on the host, which skips the commit sent behind it."""
    host: FaultHost = make_fault_host()
    python = host.ssh.root / "python3.6"
    python.write_text(
        "#!/bin/sh\necho 'SyntaxError: invalid syntax (kimi_k25.py, line 12)' >&2\nexit 1\n"
    )
    python.chmod(0o755)
    result = host.deploy(
        "apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json", "-e", f"sglang_python={python}"
    )
    assert result.exit_code == 1, result.output
    (report,) = json.loads(result.stdout)["hosts"]
    assert report["outcome"] == "rolled back"
    assert report["failed_step"] == 2, report
    assert "does not compile with" in report["error"], report["error"]
    assert report["ops"]["wait"] >= 2
    assert host.file_state() == "before"
    assert not host.stray_files()
    journal = _journal(host)
    ends = [e for e in journal if e["event"] == "end"]
    assert [e["outcome"] for e in ends] == ["rolled_back"], "no commit record, only the undo's"
    assert not (host.state_dir / "runs" / host.runs()[-1] / "manifest.json").exists()
    assert not _compiled(host), "a failed compile is never recorded"
    assert status_is_truthful(host, False)
    # The host serves the next run as usual.
    again = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert again.exit_code == 0 and host.file_state() == "after", again.output
