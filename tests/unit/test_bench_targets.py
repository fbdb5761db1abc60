"""Issue 17's targets as the bench judges them (bench/targets.py) and the page that shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import targets
from bench.plot import draw
from bench.report import render
from bench.results import Results
from bench.runner import Series

#: (tool, N, RTT) -> (change, re-run) medians; the floor's single kind is "connect".
TIMES = {
    ("deploy", 1, 0): (0.40, 0.36),
    ("floor", 1, 0): (0.30, None),
    ("fabric", 1, 0): (0.38, 0.37),
    ("deploy", 20, 0): (2.0, 1.8),
    ("floor", 20, 0): (1.6, None),
    ("fabric", 20, 0): (2.2, 2.0),
    ("ansible", 20, 0): (10.5, 8.0),
    ("pyinfra", 20, 0): (4.4, 3.0),
    ("deploy", 20, 100): (3.0, 2.0),
    ("floor", 20, 100): (2.1, None),
    ("fabric", 20, 100): (2.9, 2.5),
    ("ansible", 20, 100): (16.0, 15.0),
    ("pyinfra", 20, 100): (7.0, 6.0),
}


def _results() -> Results:
    results = Results(
        sizes=[1, 20],
        tools=["deploy", "ansible", "pyinfra", "fabric", "floor"],
        repeat=1,
        command="python -m bench",
        budget={},
        deploy_command="deploy apply",
        rtts=[0, 100],
    )
    for (tool, n, rtt), (change, rerun) in TIMES.items():
        if tool == "floor":
            results.series[(tool, n, rtt, "connect")] = Series(tool, n, "connect", [change])
            continue
        results.series[(tool, n, rtt, "change")] = Series(tool, n, "change", [change])
        if rerun is not None:
            results.series[(tool, n, rtt, "rerun")] = Series(tool, n, "rerun", [rerun])
    return results


def _verdict(found: list[targets.Check], target: str, rtt: int, n: int, kind: str) -> bool:
    (check,) = [c for c in found if (c.target, c.rtt, c.hosts, c.kind) == (target, rtt, n, kind)]
    return check.met


def test_the_floor_limits_depend_on_the_rtt() -> None:
    found = targets.checks(_results())
    # 2.0 / 1.6 = 1.25 <= 1.3 on loopback; 3.0 / 2.1 = 1.43 <= 1.5 at 100 ms
    assert _verdict(found, "deploy ÷ floor", 0, 20, "change")
    assert _verdict(found, "deploy ÷ floor", 100, 20, "change")
    # 0.40 / 0.30 = 1.33 > 1.3 on loopback
    assert not _verdict(found, "deploy ÷ floor", 0, 1, "change")
    # re-runs: 1.8 / 1.6 = 1.125 <= 1.2; 0.36 / 0.30 = 1.2 <= 1.2; 2.0 / 2.1 <= 1.2
    assert _verdict(found, "deploy ÷ floor", 0, 20, "rerun")
    assert _verdict(found, "deploy ÷ floor", 0, 1, "rerun")


def test_anchors_are_judged_at_twenty_hosts_only() -> None:
    found = targets.checks(_results())
    assert {c.hosts for c in found if c.target.endswith("÷ deploy")} == {20}
    assert _verdict(found, "ansible ÷ deploy", 0, 20, "change")  # 10.5 / 2.0 = 5.25 >= 5
    assert not _verdict(found, "ansible ÷ deploy", 0, 20, "rerun")  # 8.0 / 1.8 = 4.44 < 5
    assert not _verdict(found, "pyinfra ÷ deploy", 0, 20, "rerun")  # 3.0 / 1.8 = 1.67 < 2


def test_deploy_must_not_be_slower_than_the_fabric_script() -> None:
    found = targets.checks(_results())
    assert _verdict(found, "deploy ÷ Fabric script", 0, 20, "change")  # 2.0 <= 2.2
    assert not _verdict(found, "deploy ÷ Fabric script", 100, 20, "change")  # 3.0 > 2.9
    assert not _verdict(found, "deploy ÷ Fabric script", 0, 1, "change")  # 0.40 > 0.38


def test_the_page_has_a_column_per_rtt_and_size_and_lists_the_targets(tmp_path: Path) -> None:
    results = _results()
    page = render(results)
    assert "| tool | run | loopback, N = 1 | loopback, N = 20 | RTT 100 ms, N = 20 |" in page
    assert "## Targets (issue 17)" in page
    # paired per round: 0.36 - 0.40 at N = 1, 1.8 - 2.0 at N = 20, 2.0 - 3.0 at 100 ms
    assert "| `deploy` re-run − change run, same round (median ms) | -40 | -200 | -1000 |" in page
    assert "**missed**" in page and " met" in page
    results.plot = "performance.png"
    pytest.importorskip("matplotlib")
    assert draw(results, tmp_path / "performance.png")
    assert (tmp_path / "performance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![seconds against RTT and against N" in render(results)


def test_an_anchor_target_shows_what_a_tool_at_the_floor_would_score() -> None:
    results = _results()
    # ansible re-run at loopback N = 20: 8.0 / 1.8 = 4.44 against deploy; 8.0 / 1.6 = 5.00
    # against the floor, so the target was within reach there.
    assert targets.ceiling(results, "ansible", "rerun", 20, 0) == pytest.approx(5.0)
    page = render(results)
    (line,) = [
        x for x in page.splitlines() if x.startswith("- ansible ≥ 5× `deploy`") and "re-run" in x
    ]
    assert "loopback, N = 20: 4.44× (a tool at the floor: 5.00×)" in line
    assert "| ansible change ÷ floor | — | 6.56× | 7.62× |" in page  # 10.5/1.6, 16.0/2.1
    # the floor-limit targets carry no ceiling
    (line,) = [x for x in page.splitlines() if x.startswith("- `deploy` change run ÷ floor ≤ 1.3×")]
    assert "a tool at the floor" not in line


def test_a_baseline_runs_its_own_revisions_playbook(tmp_path: Path) -> None:
    """`--baseline-ref`: an older build is given the playbook of its own worktree (today's may
    use settings it rejects), and today's when the worktree has none."""
    from bench.deploybuild import REPO, baseline_playbook

    today = REPO / "playbooks" / "kimi-eagle3.yaml"
    assert baseline_playbook(tmp_path, today) == today
    own = tmp_path / "playbooks" / "kimi-eagle3.yaml"
    own.parent.mkdir()
    own.write_text("name: old\n")
    assert baseline_playbook(tmp_path, today) == own
    elsewhere = tmp_path / "x.yaml"
    assert baseline_playbook(tmp_path / "wt", elsewhere) == elsewhere
