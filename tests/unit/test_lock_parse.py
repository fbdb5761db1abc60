"""What the lock script reports about kept runs: the statedir scan, read up to READY."""

from __future__ import annotations

import dataclasses

from deploy.remote.lock import _scanned
from deploy.statedir import records as r
from deploy.statedir.runs import RunState


def line(record: r.Record, seq: int) -> str:
    return r.encode(dataclasses.replace(record, seq=seq)).decode().rstrip("\n")


def test_runs_come_in_host_order_with_their_state_and_nothing_after_ready_counts() -> None:
    output = [
        "RUN\t/st/runs/b/journal.jsonl",
        "RUN\t/st/runs/a/journal.jsonl",
        "F\t/st/runs/b/journal.jsonl",
        "L\t1\t" + line(r.Begin(run_id="b", host_seq=1), 1),
        "L\t5\t" + line(r.End(outcome="ok"), 5),
        "N\t5",
        "F\t/st/runs/a/journal.jsonl",
        "L\t1\t" + line(r.Begin(run_id="a", host_seq=2), 1),
        "L\t3\t" + '{"event": "intent", "path": "/x", "sha',
        "N\t3",
        "READY",
        "RUN\t/ignored/after/ready/journal.jsonl",
    ]
    runs = _scanned(output)
    assert [(x.run_id, x.state) for x in runs] == [
        ("b", RunState.CHANGED),
        ("a", RunState.UNFINISHED),
    ]
    assert runs[1].damaged is None, "a torn last line is tolerated"
    assert _scanned(["READY"]) == []
