"""A connection cut while the compile check sent with the commit runs on the host (issue 17).

The fault suite's "after write done" boundary moved into the ``end`` record's request when the
commit joined the batch (tests/faults/harness.py), so no test cut the connection while the
``CHECK`` itself runs — with the manifest and the ``end`` record already waiting in the shell's
stdin behind it. Here the host's interpreter blocks until the connection is cut, then passes or
fails: a failed check never leaves a commit record, whatever the shell does after the cut, and
the next ``apply`` finds the host consistent (recovered, or committed and unchanged).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.conftest import FILES_ONLY, FaultHost
from tests.faults.test_matrix_files import status_is_truthful

#: Blocks the first compile it is asked for while ``block`` exists (saying so in ``started``),
#: then exits with the status written to ``go``; any other call is the real interpreter.
WRAPPER = """#!/bin/sh
d={dir}
if [ -e "$d/block" ]; then
  rm -f "$d/block"; : > "$d/started"
  while [ ! -s "$d/go" ]; do sleep 0.05; done
  exit "$(cat "$d/go")"
fi
exec {python} "$@"
"""


def _events(host: FaultHost) -> list[str]:
    journal = host.state_dir / "runs" / host.runs()[-1] / "journal.jsonl"
    return [json.loads(line)["event"] for line in journal.read_text().splitlines()]


def _apply_until_the_check_blocks(host: FaultHost) -> tuple[Path, subprocess.Popen[str]]:
    """Start a change run whose compile check blocks in `WRAPPER`, and return once it runs:
    the wrapper's directory (write the check's exit status to ``go`` to end it) and the run."""
    place = host.ssh.root / "blocking-python"
    place.mkdir()
    python = place / "python3"
    python.write_text(WRAPPER.format(dir=place, python=sys.executable))
    python.chmod(0o755)
    (place / "block").touch()
    process = host.deploy.popen(
        "apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json", "-e", f"sglang_python={python}"
    )
    deadline = time.monotonic() + 60
    while not (place / "started").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the compile check never started"
        time.sleep(0.02)
    return place, process


@pytest.mark.parametrize("status", [0, 1])
def test_a_cut_while_the_check_runs_leaves_the_host_consistent(
    make_fault_host, status: int
) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    place, process = _apply_until_the_check_blocks(host)
    assert _events(host) == ["begin", "backup", "intent", "done"]
    host.proxy.cut()
    out, err = process.communicate(timeout=120)
    (place / "go").write_text(str(status))
    # The shell had the manifest and the end record in its stdin, behind the check.
    time.sleep(2)
    assert process.returncode == 3, out + err  # the client cannot know: a human must look
    assert host.file_state() == "after"
    events = _events(host)
    if status != 0:
        assert events == ["begin", "backup", "intent", "done"], "a failed check committed"
    else:
        assert events in (["begin", "backup", "intent", "done"], [*events[:4], "end"]), events
    committed = events[-1] == "end"
    assert status_is_truthful(host, not committed)
    if status != 0:
        assert not (host.state_dir / "runs" / host.runs()[-1] / "manifest.json").exists()

    again = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json")
    assert again.exit_code == 0, again.output
    (report,) = json.loads(again.stdout)["hosts"]
    if committed:
        assert report["outcome"] == "unchanged" and not report["recovered"], report
    else:
        assert report["outcome"] == "changed" and report["recovered"], report
    assert host.file_state() == "after"


@pytest.mark.parametrize("status", [0, 1])
def test_a_first_sigint_while_the_check_runs_is_answered_by_the_checks_verdict(
    make_fault_host, status: int
) -> None:  # type: ignore[no-untyped-def]
    """The commit was sent behind the check, so the cancel no longer stops it
    (deploy/engine/verdicts.py): a pass commits (exit 0, truthfully), a failure is rolled
    back (exit 1) — the host and the report agree either way."""
    host: FaultHost = make_fault_host()
    place, process = _apply_until_the_check_blocks(host)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    (place / "go").write_text(str(status))
    out, err = process.communicate(timeout=120)
    (report,) = json.loads(out)["hosts"]
    events = _events(host)
    if status == 0:
        assert process.returncode == 0 and report["outcome"] == "changed", out + err
        assert events[-1] == "end" and host.file_state() == "after", events
    else:
        assert process.returncode == 1 and report["outcome"] == "rolled back", out + err
        assert host.file_state() == "before"
        ends = [e for e in host.journal_events() if e == "end"]
        assert ends == ["end"] and events[-2:] == ["undone", "end"], events
    assert status_is_truthful(host, False)
