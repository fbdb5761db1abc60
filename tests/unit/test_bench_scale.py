"""The "Fleet scale" section (bench/report_scale.py) and the CPU/memory tables of the main page
(bench/report_usage.py), from figures set here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import kept_sections
from bench.cells import busy, per_host_above, ratio
from bench.pinning import Placement
from bench.report import render as render_page
from bench.report_scale import render, splice
from bench.results import Results
from bench.runner import Series
from bench.scale import ScaleResults, rerender

MIB = 2**20
PINNED = Placement(frozenset({0}), frozenset({1}))


def _series(
    tool: str, n: int, kind: str, seconds: list[float], cpu: list[float], rss: int
) -> Series:
    return Series(tool, n, kind, seconds, cpu, [rss] * len(seconds))


def _results() -> ScaleResults:
    results = ScaleResults(
        sizes=[100, 200],
        tools=["deploy", "ansible", "pyinfra", "floor"],
        placements=[Placement(), PINNED],
        repeat=3,
        command="python -m bench --scale --hosts 100,200 --pin-client 0 --pin-hosts 1",
    )
    results.facts = {"machine": "2 cores (x), Linux, loopback", "date (UTC)": "2026-12-04 23:00"}
    results.capped["ansible"] = (
        100,
        "`--max-hosts ansible=100`, to keep the run within its time limit",
    )
    results.rounds = {100: 3, 200: 3}
    results.load = {"N = 100, round 1": "3.00 / 2.00 / 1.00", "N = 200, round 1": "5.50 / 3 / 2"}
    for placement in ("unpinned", "pinned"):
        for n in (100, 200):
            k = n / 100
            s = results.series
            s[(placement, "deploy", n, "change")] = _series(
                "deploy", n, "change", [10 * k, 11 * k, 12 * k], [5 * k, 6 * k, 7 * k], 60 * MIB
            )
            s[(placement, "deploy", n, "rerun")] = _series(
                "deploy", n, "rerun", [9 * k], [5 * k], 58 * MIB
            )
            s[(placement, "pyinfra", n, "change")] = _series(
                "pyinfra", n, "change", [16 * k if n == 100 else 14 * k], [8 * k], 100 * MIB
            )
            s[(placement, "pyinfra", n, "rerun")] = _series(
                "pyinfra", n, "rerun", [15 * k], [8 * k], MIB
            )
            s[(placement, "floor", n, "connect")] = _series(
                "floor", n, "connect", [8 * k], [3 * k], 40 * MIB
            )
            if n == 100:
                s[(placement, "ansible", n, "change")] = _series(
                    "ansible", n, "change", [40.0], [30.0], 2000 * MIB
                )
                s[(placement, "ansible", n, "rerun")] = _series(
                    "ansible", n, "rerun", [38.0], [29.0], 2000 * MIB
                )
    return results


def test_the_section_has_wall_cpu_and_memory_per_host_for_each_placement_and_size() -> None:
    text = render(_results())
    header = (
        "| tool | run | unpinned, N = 100 | unpinned, N = 200 | pinned, N = 100 | pinned, N = 200 |"
    )
    assert text.count(header) == 4  # wall, CPU, memory, busy shares
    assert "| `deploy` | change run | 11.00 [10.00–12.00] | 22.00 [20.00–24.00] |" in text
    # CPU: median 6 s over 100 hosts = 60 ms a host
    assert "| `deploy` | change run | 6.00 (60.0 ms/host) | 12.00 (60.0 ms/host) |" in text
    # memory: 60 MiB over 100 hosts, over 200
    assert "| `deploy` | change run | 0.60 (60 in all) | 0.30 (60 in all) |" in text
    assert "| `ansible` | change run | 40.00 [40.00–40.00] | not run |" in text
    assert "- `ansible` not run at N = 200: `--max-hosts ansible=100`" in text
    assert "3.0–5.5 on 2 cores" in text


def test_the_target_is_judged_on_wall_time_at_100_hosts_and_more() -> None:
    text = render(_results())
    # 16 / 11 = 1.45 at 100 hosts: missed; 28 / 22 = 1.27 at 200: missed
    row = "| pyinfra change ÷ `deploy` change | wall time | 1.45× **missed** | 1.27× **missed** |"
    assert row in text
    assert "| pyinfra change ÷ `deploy` change | CPU-seconds | 1.33× | 1.33× |" in text
    results = _results()
    results.series[("pinned", "pyinfra", 200, "change")].seconds = [40.0]
    assert "1.82× met |" in render(results)


def test_ratios_busy_shares_and_per_host_cpu_above_the_floor() -> None:
    results = _results()
    deploy = results.get("pinned", "deploy", 200, "change")
    floor = results.get("pinned", "floor", 200, "connect")
    assert ratio(deploy, floor) == 22 / 16
    assert ratio(deploy, floor, "cpu") == 12 / 6
    assert per_host_above(deploy, floor, 200) == (12 - 6) / 200 * 1000
    # from 100 to 200 hosts deploy's CPU grows 6 s, the floor's 3 s: 30 ms per added host
    row = "| `deploy` change run − floor, per added host | CPU ms | — | +30.0 (N = 100 → 200) |"
    assert row in render(results)
    # CPU ÷ wall over the one client core, median over the three runs
    assert busy(deploy, 1) == pytest.approx(12 / 22)  # 10/20, 12/22, 14/24
    assert ratio(None, floor) is None and busy(None, 1) is None
    assert "| `deploy` | change run | 27 % of 2 | 27 % of 2 | 55 % of 1 | 55 % of 1 |" in render(
        results
    )


def test_failed_runs_are_listed_and_not_averaged() -> None:
    results = _results()
    series = results.series[("pinned", "pyinfra", 200, "change")]
    series.seconds, series.cpu, series.rss = [], [], []
    series.failures.append("round 1: timed out after 600 s")
    text = render(results)
    assert "### Failures" in text and "timed out after 600 s" in text
    assert "— (1 failed†)" in text


def test_splice_replaces_the_section_or_puts_it_before_the_ablation() -> None:
    section = "## Fleet scale (issue 33)\n\nnew\n"
    page = "# P\n\n## Seconds\nx\n\n## Ablation (issue 33)\n\ny\n"
    once = splice(page, section)
    assert (
        once
        == "# P\n\n## Seconds\nx\n\n## Fleet scale (issue 33)\n\nnew\n\n## Ablation (issue 33)\n\ny\n"
    )
    assert splice(once, section.replace("new", "newer")).count("## Fleet scale") == 1
    assert "newer\n\n## Ablation" in splice(once, section.replace("new", "newer"))
    assert splice("# P\n", section) == "# P\n\n" + section


def test_a_regenerated_page_keeps_the_fleet_scale_section(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(
        "# P\n\n## Seconds\nold\n\n## Fleet scale (issue 33)\n\nf\n\n"
        "## Findings at 100 and 200 hosts (issue 33)\n\nh\n\n## Ablation\n\na\n"
    )
    assert kept_sections(page) == (
        "\n## Fleet scale (issue 33)\n\nf\n"
        "\n## Findings at 100 and 200 hosts (issue 33)\n\nh\n"
        "\n## Ablation\n\na\n"
    )


def test_the_main_page_has_cpu_and_memory_tables_beside_the_seconds() -> None:
    results = Results(
        sizes=[1, 20],
        tools=["deploy", "floor"],
        repeat=1,
        command="python -m bench",
        budget={},
        deploy_command="deploy apply",
    )
    results.series[("deploy", 20, 0, "change")] = _series(
        "deploy", 20, "change", [2.0], [0.5], 80 * MIB
    )
    results.series[("floor", 20, 0, "connect")] = _series(
        "floor", 20, "connect", [1.6], [0.2], 40 * MIB
    )
    text = render_page(results)
    assert "## Client CPU and memory" in text
    assert "| `deploy` | change run | 0.50 (25.0 ms/host) |" in text
    assert "| floor | connect + `true` | 2.00 (40 in all) |" in text
    assert text.index("## Seconds") < text.index("## Client CPU") < text.index("## Ratios")


def test_the_raw_figures_give_the_same_section_again(tmp_path: Path) -> None:
    results = _results()
    source = tmp_path / "performance.scale.json"
    source.write_text(json.dumps(results.to_json()))
    page = tmp_path / "performance.md"
    page.write_text("# P\n\n## Ablation\n\na\n")
    assert rerender(source, page) == 0
    assert page.read_text() == "# P\n\n" + render(results) + "\n## Ablation\n\na\n"


def test_change_only_runs_have_no_rerun_rows() -> None:
    results = _results()
    for key in [k for k in results.series if k[3] == "rerun"]:
        del results.series[key]
    text = render(results)
    assert "no-change re-run" not in text
    assert "| `deploy` | change run | 11.00 [10.00–12.00] |" in text
