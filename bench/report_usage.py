"""The main page's "Client CPU and memory" section: what each timed run cost the workstation.

The same runs as the Seconds table, the same columns: the CPU-seconds of the tool's process
tree and the peak of its summed resident memory, per host (`bench.usage`). On a machine whose
cores the hosts share (loopback), CPU-seconds hold where wall time drifts with the load.
"""

from __future__ import annotations

from bench.cells import cpu_cell, memory_cell
from bench.markdown import KIND_LABEL, column, table
from bench.results import Results


def usage_section(results: Results, label: dict[str, str]) -> list[str]:
    """Two tables, CPU-seconds and memory per host; nothing if no run recorded them."""
    columns = results.columns()
    if not any(s.cpu for s in results.series.values()):
        return []
    cpu_rows, memory_rows = [], []
    for tool in results.tools:
        kinds = ("connect",) if tool.startswith("floor") else ("change", "rerun")
        for kind in kinds:
            found = [(results.series.get((tool, n, rtt, kind)), n) for rtt, n in columns]
            name = label.get(tool, f"`{tool}`")
            cpu_rows.append([name, KIND_LABEL[kind], *[cpu_cell(s, n) for s, n in found]])
            memory_rows.append([name, KIND_LABEL[kind], *[memory_cell(s, n) for s, n in found]])
    header = ["tool", "run", *[column(r, n) for r, n in columns]]
    return [
        "## Client CPU and memory",
        "",
        "The same timed runs. **CPU-seconds**: user + system time of the tool's whole process "
        "tree (`RUSAGE_CHILDREN` around it, so its reaped children — ansible's forks, worker "
        "processes — are in it; nothing of the hosts), median, and per host. **Memory**: the "
        "peak of the resident set sizes summed over the tool's process tree, sampled every "
        "20 ms from `/proc` (`bench/usage.py`; not `ru_maxrss`, the largest single process), "
        "median, per host and in all; for a tool that forks, shared pages count once per "
        "process.",
        "",
        "CPU-seconds (per host):",
        "",
        *table(header, cpu_rows),
        "",
        "Memory, MiB per host (in all):",
        "",
        *table(header, memory_rows),
        "",
    ]
