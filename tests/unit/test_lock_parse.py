"""What the lock script reports about kept runs: ``tail -v -n 1`` over every journal, parsed."""

from __future__ import annotations

from deploy.remote.lock import _last_lines


def test_every_run_its_last_event_and_torn_or_empty_journals_count_as_unfinished() -> None:
    output = [
        "==> /st/runs/20261129T1-a/journal.jsonl <==",
        '{"event": "end", "outcome": "changed"}',
        "",
        "==> /st/runs/20261129T2-b/journal.jsonl <==",
        "",
        "==> /st/runs/20261129T3-c/journal.jsonl <==",
        '{"event": "intent", "path": "/x", "sha',
        "READY",
        "==> /ignored/after/ready/journal.jsonl <==",
    ]
    runs = _last_lines(output)
    assert [(r.run_id, r.finished) for r in runs] == [
        ("20261129T1-a", True),
        ("20261129T2-b", False),
        ("20261129T3-c", False),
    ]
    assert runs[0].last == {"event": "end", "outcome": "changed"}
    assert _last_lines(["READY"]) == []
