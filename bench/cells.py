"""A series' figures as the cells and ratios of the bench's tables: wall time, CPU-seconds,
memory per host, how busy a tool kept its cores. Shared by the main page's CPU and memory
tables (`bench.report_usage`) and the Fleet scale section (`bench.report_scale`)."""

from __future__ import annotations

import statistics

from bench.runner import Series

MIB = 2**20


def _failed(series: Series) -> str:
    if series.wrong:
        return "**WRONG**"
    return f" ({len(series.failures)} failed†)" if series.failures else ""


def wall_cell(series: Series | None) -> str:
    """``median [min–max]`` seconds."""
    if series is None:
        return "not run"
    if not series.ok:
        return "—" + _failed(series)
    low, high = min(series.seconds), max(series.seconds)
    return f"{series.median:.2f} [{low:.2f}–{high:.2f}]" + _failed(series)


def cpu_cell(series: Series | None, count: int) -> str:
    """Median CPU-seconds of the tool's process tree, and per host in ms."""
    if series is None:
        return "not run"
    cpu = series.cpu_median
    if cpu is None:
        return "—" + _failed(series)
    return f"{cpu:.2f} ({cpu / count * 1000:.1f} ms/host)"


def memory_cell(series: Series | None, count: int) -> str:
    """Median peak summed RSS per host, and in all, in MiB."""
    if series is None:
        return "not run"
    rss = series.rss_median
    if rss is None:
        return "—" + _failed(series)
    return f"{rss / count / MIB:.2f} ({rss / MIB:.0f} in all)"


def busy(series: Series | None, cores: int) -> float | None:
    """The share of its ``cores`` the tool kept busy: median over runs of CPU ÷ wall ÷ cores."""
    if series is None or not series.ok or not series.cpu:
        return None
    shares = [c / s / cores for c, s in zip(series.cpu, series.seconds, strict=True) if s > 0]
    return statistics.median(shares) if shares else None


def median_of(series: Series | None, what: str) -> float | None:
    if series is None or not series.ok:
        return None
    if what == "cpu":
        return series.cpu_median
    return series.median


def ratio(top: Series | None, bottom: Series | None, what: str = "wall") -> float | None:
    """``top`` ÷ ``bottom`` of medians, wall time or CPU-seconds."""
    high, low = median_of(top, what), median_of(bottom, what)
    return None if high is None or low is None or low == 0 else high / low


def per_host_above(tool: Series | None, floor: Series | None, count: int) -> float | None:
    """(tool's CPU − the floor's CPU) ÷ hosts, medians, in ms."""
    high, low = median_of(tool, "cpu"), median_of(floor, "cpu")
    return None if high is None or low is None else (high - low) / count * 1000
