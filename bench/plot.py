"""The picture beside docs/performance.md's tables: seconds against RTT and against N.

Four panels: the change run (top) and the no-change re-run (bottom), each against the
round-trip time (left: solid at the largest fleet, dashed at the smallest) and against the
number of hosts (right: solid at the largest RTT, dashed on loopback); one colour per tool,
the floor (connect + ``true``) drawn in both rows. Medians, as in the tables.

matplotlib is an optional dependency of the bench (``pip install -e '.[bench]'``); without it
`draw` returns False and the page says how to get the picture.
"""

from __future__ import annotations

from pathlib import Path

from bench.results import Results

COLOURS = {
    "deploy": "#1f77b4",
    "ansible": "#d62728",
    "pyinfra": "#ff7f0e",
    "fabric": "#2ca02c",
    "floor": "#7f7f7f",
    "floor-nodelay": "#bcbd22",
}
LABELS = {
    "fabric": "plain Fabric script",
    "floor": "floor (connect + true)",
    "floor-nodelay": "floor, TCP_NODELAY",
}


def _kind(tool: str, kind: str) -> str:
    return "connect" if tool.startswith("floor") else kind


def draw(results: Results, path: Path) -> bool:
    """Write the PNG at ``path``; False (nothing written) if matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rtts = [r for r in results.rtts if any(k[2] == r for k in results.series)]
    sizes = [n for n in results.sizes if any(k[1] == n for k in results.series)]
    if not rtts or not sizes:
        return False
    figure, axes = plt.subplots(2, 2, figsize=(11, 8), sharey="row")
    big, small = max(sizes), min(sizes)
    far, near = max(rtts), min(rtts)
    for row, kind in enumerate(("change", "rerun")):
        title = "change run" if kind == "change" else "no-change re-run"
        by_rtt, by_n = axes[row][0], axes[row][1]
        for tool in results.tools:
            colour = COLOURS.get(tool, "black")
            label = LABELS.get(tool, tool)
            which = _kind(tool, kind)
            for n, style in ((big, "-"), (small, "--")):
                xs = [r for r in rtts if results.median(tool, n, r, which) is not None]
                ys = [results.median(tool, n, r, which) for r in xs]
                if xs and (style == "-" or small != big):
                    by_rtt.plot(xs, ys, style, marker="o", color=colour, label=label)
                    label = "_nolegend_"
            label = LABELS.get(tool, tool)
            for rtt, style in ((far, "-"), (near, "--")):
                xs = [n for n in sizes if results.median(tool, n, rtt, which) is not None]
                ys = [results.median(tool, n, rtt, which) for n in xs]
                if xs and (style == "-" or near != far):
                    by_n.plot(xs, ys, style, marker="o", color=colour, label=label)
                    label = "_nolegend_"
        by_rtt.set_title(
            f"{title} against RTT (solid N = {big}"
            + (f", dashed N = {small})" if small != big else ")")
        )
        by_rtt.set_xlabel("round-trip time (ms)")
        by_rtt.set_xticks(rtts)
        by_n.set_title(
            f"{title} against N (solid RTT {far} ms"
            + (f", dashed RTT {near} ms)" if near != far else ")")
        )
        by_n.set_xlabel("hosts (N)")
        by_n.set_xticks(sizes)
        by_rtt.set_ylabel("seconds (median, log scale)")
        for ax in (by_rtt, by_n):
            ax.grid(True, alpha=0.3)
            ax.set_yscale("log")  # ratios read as distances, ansible does not squash the rest
            ax.title.set_fontsize(10)
    axes[0][0].legend(fontsize=8, loc="upper left")
    figure.suptitle("deploy against ansible-core, pyinfra, a plain Fabric script and the floor")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(figure)
    return True
