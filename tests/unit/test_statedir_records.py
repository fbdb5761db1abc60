"""Journal records: checksums, versions, torn tails, damage named by file and line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.statedir import records as r
from deploy.statedir.layout import STATE_EVENTS, Layout, parse_scan
from deploy.statedir.runs import RunState


def journal(*items: r.Record) -> bytes:
    return b"".join(r.encode(_with_seq(item, n)) for n, item in enumerate(items, 1))


def _with_seq(item: r.Record, seq: int) -> r.Record:
    import dataclasses

    return dataclasses.replace(item, seq=seq, ts="2026-11-30T20:00:00.000001+00:00")


WRITE = r.WriteIntent(
    path="/m.py",
    before="a" * 64,
    after="b" * 64,
    original="a" * 64,
    mode=0o644,
    uid=0,
    gid=0,
    size=3,
)
RUN = [
    r.Begin(run_id="R1", host_seq=1),
    r.Backup(path="/m.py", sha256="a" * 64),
    WRITE,
    r.Done(op="write", path="/m.py"),
    r.End(outcome="ok"),
]


def test_every_kind_round_trips_through_its_line() -> None:
    kinds = [
        *RUN,
        r.ServiceIntent(service="s", action="restart", before={"env": {"A": "1"}}),
        r.RollbackBegin(reason="x", force=True),
        r.Undone(op="write", path="/m.py", action="restored"),
        r.UndoFailed(error="e"),
        r.RollbackEnd(by="R2"),
    ]
    for item in kinds:
        line = r.encode(item)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        data = json.loads(line)
        assert data["v"] == r.FORMAT and len(data["sum"]) == 16
        assert r.decode_line(line.decode()) == item


def test_a_changed_byte_fails_the_checksum() -> None:
    line = r.encode(WRITE).decode().replace('"size":3', '"size":4')
    with pytest.raises(ValueError, match="checksum"):
        r.decode_line(line)


def test_a_newer_format_is_refused_not_guessed() -> None:
    data = json.loads(r.encode(r.End()))
    data["v"] = r.FORMAT + 1
    data["sum"] = r.checksum(data)
    with pytest.raises(ValueError, match="newer"):
        r.decode_line(json.dumps(data))


def test_legacy_lines_without_version_are_read() -> None:
    legacy = json.dumps({"event": "end", "outcome": "ok", "ts": "2026-11-29T10:00:00+00:00"})
    assert r.decode_line(legacy) == r.End(outcome="ok", ts="2026-11-29T10:00:00+00:00")


def test_only_a_torn_last_line_is_tolerated() -> None:
    data = journal(*RUN)
    torn = data + r.encode(r.RollbackBegin())[:20]
    parsed = r.parse_journal(torn, "/s/runs/R1/journal.jsonl")
    assert parsed.torn_tail and len(parsed.records) == len(RUN)
    lines = data.split(b"\n")
    lines[2] = lines[2].replace(b'"size":3', b'"size":9')
    with pytest.raises(r.JournalDamaged) as caught:
        r.parse_journal(b"\n".join(lines), "/s/runs/R1/journal.jsonl")
    assert caught.value.line == 3
    assert "/s/runs/R1/journal.jsonl:3:" in str(caught.value)


def test_a_missing_line_is_damage_even_when_every_line_checks_out() -> None:
    lines = journal(*RUN).split(b"\n")
    del lines[1]
    with pytest.raises(r.JournalDamaged, match=r":2: .*seq 3 where 2 belongs"):
        r.parse_journal(b"\n".join(lines), "j")


def test_the_scan_script_reads_state_lines_with_real_awk(tmp_path: Path) -> None:
    """The shell the lock and status embed, run by sh/awk over a real directory."""
    layout = Layout(str(tmp_path))
    done = journal(*RUN)
    cut = journal(*RUN[:3])
    bad_first = journal(*RUN).replace(b'"host_seq":1', b'"host_seq":7', 1)
    undoing = journal(*RUN, r.RollbackBegin(reason="deploy rollback"))
    torn_end = journal(*RUN[:4]) + r.encode(_with_seq(r.End(), 5))[:30]
    for run_id, data in [
        ("R1", done),
        ("R2", cut),
        ("R3", bad_first),
        ("R4", undoing),
        ("R5", torn_end),
        ("R6", b""),
    ]:
        Path(layout.run_dir(run_id)).mkdir(parents=True)
        Path(layout.journal(run_id)).write_bytes(data)
    script = hostsh.program("scan.sh", {"_dS": str(tmp_path)})
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    runs = {run.run_id: run for run in parse_scan(out.splitlines())}
    assert runs["R1"].state is RunState.CHANGED and runs["R1"].host_seq == 1
    assert runs["R2"].state is RunState.UNFINISHED
    assert runs["R3"].damaged and f"{tmp_path}/runs/R3/journal.jsonl:1:" in runs["R3"].damaged
    assert runs["R4"].state is RunState.UNDOING
    assert runs["R5"].state is RunState.UNFINISHED and not runs["R5"].damaged
    assert runs["R6"].state is RunState.UNFINISHED
    empty = subprocess.run(
        ["sh", "-c", hostsh.program("scan.sh", {"_dS": f"{tmp_path}/none"})],
        capture_output=True,
        text=True,
    ).stdout
    assert parse_scan(empty.splitlines()) == []


def test_layout_paths_and_trust_paths() -> None:
    layout = Layout("/var/lib/deploy/")
    assert layout.copy("R1", "ab") == "/var/lib/deploy/runs/R1/files/ab"
    assert layout.trust_paths() == ["/var/lib/deploy", "/var/lib", "/var", "/"]
    assert Layout("/").lock == "/lock" and Layout("/").trust_paths() == ["/"]
    with pytest.raises(ValueError):
        layout.run_dir("../x")


def test_the_scan_reads_exactly_the_state_events() -> None:
    """``scan.sh``'s awk pattern lists `STATE_EVENTS`, no more, no fewer (it is static text)."""
    pattern = '/"event": ?"(' + "|".join(STATE_EVENTS) + ')"/'
    assert hostsh.text("scan.sh").count(pattern) == 1
