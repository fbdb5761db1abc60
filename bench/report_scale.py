"""The page's "Fleet scale" section, from a ``python -m bench --scale`` run (`bench.scale`).

Three tables side by side in meaning — wall time, the tool's CPU-seconds, its process tree's
memory per host — for every placement (unpinned; pinned) and fleet size, then the ratios the
issue sets targets on, how busy each tool kept the cores it had, and what this machine can
and cannot show. `splice` puts the section into the page in place of an older one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.cells import busy, cpu_cell, median_of, memory_cell, per_host_above, ratio, wall_cell
from bench.markdown import KIND_LABEL, table

if TYPE_CHECKING:
    from bench.scale import ScaleResults

HEADING = "## Fleet scale"
#: pyinfra ÷ deploy, change run, wall time, at least (issue 33, point 4) at N >= TARGET_HOSTS.
TARGET = 1.5
TARGET_HOSTS = 100
LABEL = {
    "floor": "floor",
    "fabric": "plain Fabric script",
    "deploy-workers": "`deploy --workers`",
}


def _label(tool: str) -> str:
    return LABEL.get(tool, f"`{tool}`")


def _kinds(tool: str) -> tuple[str, ...]:
    return ("connect",) if tool == "floor" else ("change", "rerun")


def _columns(results: ScaleResults) -> list[tuple[str, int]]:
    return [(p.name, n) for p in results.placements for n in results.sizes]


def _column(placement: str, count: int) -> str:
    return f"{placement}, N = {count}"


def _measured_kinds(results: ScaleResults, tool: str) -> list[str]:
    """The kinds of run of ``tool`` that have a series (``--change-only``: no re-runs)."""
    have = {key[3] for key in results.series if key[1] == tool}
    return [kind for kind in _kinds(tool) if kind in have] or list(_kinds(tool)[:1])


def _metric_table(results: ScaleResults, cell: str) -> list[str]:
    rows = []
    for tool in results.tools:
        for kind in _measured_kinds(results, tool):
            cells = []
            for placement, count in _columns(results):
                if not results.runs(tool, count):
                    cells.append("not run")
                    continue
                series = results.get(placement, tool, count, kind)
                if cell == "wall":
                    cells.append(wall_cell(series))
                elif cell == "cpu":
                    cells.append(cpu_cell(series, count))
                else:
                    cells.append(memory_cell(series, count))
            rows.append([_label(tool), KIND_LABEL[kind], *cells])
    header = ["tool", "run", *[_column(p, n) for p, n in _columns(results)]]
    return table(header, rows)


#: (label, top tool, top kind, bottom tool, bottom kind)
RATIOS = [
    ("pyinfra change ÷ `deploy` change", "pyinfra", "change", "deploy", "change"),
    ("pyinfra re-run ÷ `deploy` re-run", "pyinfra", "rerun", "deploy", "rerun"),
    ("`deploy` change ÷ floor", "deploy", "change", "floor", "connect"),
    ("`deploy` re-run ÷ floor", "deploy", "rerun", "floor", "connect"),
    ("`deploy` change ÷ Fabric script change", "deploy", "change", "fabric", "change"),
    ("ansible change ÷ `deploy` change", "ansible", "change", "deploy", "change"),
    ("`deploy --workers` change ÷ `deploy` change", "deploy-workers", "change", "deploy", "change"),
    ("pyinfra change ÷ `deploy --workers` change", "pyinfra", "change", "deploy-workers", "change"),
]


def _ratio_rows(results: ScaleResults) -> list[list[str]]:
    rows = []
    kinds = {key[1:4:2] for key in results.series}  # (tool, kind) pairs measured
    for label, top, top_kind, bottom, bottom_kind in RATIOS:
        if (top, top_kind) not in kinds or (bottom, bottom_kind) not in kinds:
            continue
        for what in ("wall", "cpu"):
            cells = []
            for placement, count in _columns(results):
                found = ratio(
                    results.get(placement, top, count, top_kind),
                    results.get(placement, bottom, count, bottom_kind),
                    what,
                )
                text = "—" if found is None else f"{found:.2f}×"
                judged = what == "wall" and count >= TARGET_HOSTS
                if found is not None and judged and _targeted(top, bottom, top_kind):
                    text += " met" if found >= TARGET else " **missed**"
                cells.append(text)
            rows.append([label, "wall time" if what == "wall" else "CPU-seconds", *cells])
    for kind in _measured_kinds(results, "deploy"):
        cells = []
        for placement, count in _columns(results):
            above = per_host_above(
                results.get(placement, "deploy", count, kind),
                results.get(placement, "floor", count, "connect"),
                count,
            )
            cells.append("—" if above is None else f"{above:+.1f}")
        rows.append([f"`deploy` {KIND_LABEL[kind]} − floor, per host", "CPU ms", *cells])
        rows.append(
            [
                f"`deploy` {KIND_LABEL[kind]} − floor, per added host",
                "CPU ms",
                *_slopes(results, kind),
            ]
        )
    return rows


def _slopes(results: ScaleResults, kind: str) -> list[str]:
    """Per placement, from each size to the next: (Δ deploy − Δ floor) CPU ÷ Δ hosts, in ms —
    the per-host cost above the floor with the fixed costs of both taken out."""
    cells = []
    for placement, count in _columns(results):
        smaller = [n for n in results.sizes if n < count]
        if not smaller:
            cells.append("—")
            continue
        low = smaller[-1]
        ends = [
            median_of(results.get(placement, tool, n, k), "cpu")
            for tool, k in (("deploy", kind), ("floor", "connect"))
            for n in (low, count)
        ]
        if any(v is None for v in ends):
            cells.append("—")
            continue
        d_low, d_high, f_low, f_high = (float(v or 0) for v in ends)
        slope = ((d_high - d_low) - (f_high - f_low)) / (count - low) * 1000
        cells.append(f"{slope:+.1f} (N = {low} → {count})")
    return cells


def _targeted(top: str, bottom: str, kind: str) -> bool:
    return top == "pyinfra" and bottom in ("deploy", "deploy-workers") and kind == "change"


def _busy_rows(results: ScaleResults) -> list[list[str]]:
    rows = []
    measured = {key[1] for key in results.series}
    for tool in [t for t in results.tools if t in measured]:
        kind = _kinds(tool)[0]
        cells = []
        for placement in results.placements:
            cores = len(placement.client) if placement.client else _cores(results)
            for count in results.sizes:
                share = busy(results.get(placement.name, tool, count, kind), cores)
                cells.append("—" if share is None else f"{share * 100:.0f} % of {cores}")
        rows.append([_label(tool), KIND_LABEL[kind], *cells])
    return rows


def _cores(results: ScaleResults) -> int:
    text = results.facts.get("machine", "")
    head = text.split(" cores")[0]
    return int(head) if head.isdigit() else 1


def _loads(results: ScaleResults) -> str:
    ones = []
    for text in results.load.values():
        try:
            ones.append(float(text.split("/")[0]))
        except ValueError:
            continue
    if not ones:
        return "not recorded"
    return f"{min(ones):.1f}–{max(ones):.1f}"


def _shares(results: ScaleResults, placement: str, count: int, cores: int) -> str:
    found = []
    for tool in results.tools:
        share = busy(results.get(placement, tool, count, _kinds(tool)[0]), cores)
        if share is not None:
            found.append(f"{_label(tool)} {share * 100:.0f} %")
    return ", ".join(found) or "not measured"


def _can_and_cannot(results: ScaleResults) -> list[str]:
    """What a machine whose hosts share its cores can and cannot show (numbers from the run)."""
    cores = _cores(results)
    pinned = [p for p in results.placements if p.pinned]
    largest = max(results.sizes)
    lines = [
        "### What this machine can and cannot show",
        "",
        f"The hosts are not remote here: the {largest} sshd daemons, every session's login "
        "shell (root's `.bashrc` included) and `deploy`'s file helpers run on the same "
        f"{cores} cores as the tool under test. A real fleet has one machine per host; here "
        f"{largest} hosts share what is left of {cores} cores, so the hosts' side of every "
        "login, not the tool, sets most of each run's wall time.",
        "",
        "- **Holds on any machine**: the CPU-seconds of the tool's process tree and its memory "
        "per host. They do not depend on how long the tool waited for the hosts, and the "
        "CPU ratio between two tools is what their wall-time ratio tends to on a workstation "
        "whose client is the limit (the issue's 16-core figures: at 200 hosts the floor no "
        "longer limits, CPU does).",
        "- **Unpinned wall time cannot show that**: every tool competes with "
        f"{largest}-odd host processes for both cores, so a tool that spends less CPU hands "
        "it to the hosts, whose work then finishes sooner for every tool alike; the "
        "wall-time ratio between two tools is pulled towards 1 and mixes the client's cost "
        "with the scheduler's sharing.",
    ]
    for placement in pinned:
        client = len(placement.client or ())
        lines.append(
            f"- **Pinned** ({placement.describe()}): the tool has {client} core(s) of its "
            "own, so its CPU shows in its wall time where it is the limit. At "
            f"N = {largest} the tools kept their core busy (change run; CPU-seconds ÷ wall "
            f"time): {_shares(results, placement.name, largest, client)}. Where a tool's "
            "share is near 100 % its wall time is its CPU and the pinned wall ratio is the "
            "client ratio; where it is well below, it was waiting for the hosts' core(s), "
            f"on which {largest} hosts queue — a floor no client can go below here, so that "
            "ratio shows the hosts' side of each tool (how many login shells and programs it "
            "starts per host), not the clients' CPU. Pinning places only the bench's own "
            "processes: other work on the machine (the load average above) still runs on "
            "every core, the client's included. Still not shown: a "
            "workstation with more cores than one, where a tool on threads of one process "
            "(`deploy` today, pyinfra on gevent) stays on one core while one that forks "
            "(ansible, worker processes) spreads over all of them; with one client core, "
            "worker processes can only add their own start-up."
        )
    return [*lines, ""]


def render(results: ScaleResults) -> str:
    """The whole section, ending with a newline."""
    facts = results.facts
    rounds = ", ".join(f"N = {n}: {r}" for n, r in sorted(results.rounds.items()))
    placements = "; ".join(f"**{p.name}**: {p.describe()}" for p in results.placements)
    lines = [
        f"{HEADING} (issue 33)",
        "",
        f"<!-- Generated by `{results.command}` (bench/scale.py). `python -m bench` keeps "
        "this section when it regenerates the page; run that command again to renew it. -->",
        "",
        f"Measured {facts.get('date (UTC)', '?')} UTC on {facts.get('machine', '?')}, "
        f"`deploy` {facts.get('deploy', '?')}, with:",
        "",
        "```",
        results.command,
        "```",
        "",
        "Loopback only: at 100 and 200 hosts the floor (a paramiko login and one `true` per "
        "host, on threads of one process) is no longer the limit, CPU is — and a delay adds "
        "the same waits to every host in parallel, without moving any CPU. Each round times "
        "every tool in each placement, in turn (the order of the placements alternating from "
        f"round to round): {placements}. Timed rounds: {rounds or 'none'}, after one untimed "
        "warm-up run of every tool on 2 hosts. 1-minute load average at the rounds' start: "
        f"{_loads(results)} on {_cores(results)} cores (other sessions' tests shared them: "
        "the seconds are slower and noisier than on an idle machine; the CPU-seconds much "
        "less so).",
        "",
        "**CPU-seconds**: user + system time of the tool's whole process tree "
        "(`RUSAGE_CHILDREN` around it: its reaped children, such as worker processes or "
        "ansible's forks, included; nothing of the hosts). **Memory**: the peak, over samples "
        "every 20 ms, of the resident set sizes summed over the tool's process tree "
        "(`/proc/PID/statm`, `bench/usage.py`) — not `RUSAGE_CHILDREN`'s `ru_maxrss`, which "
        "is the largest single process; for a tool that forks, pages its processes share "
        "are counted once per process, an upper bound.",
        "",
    ]
    for tool, (count, why) in sorted(results.capped.items()):
        larger = [n for n in results.sizes if n > count]
        if larger and tool in results.tools:
            sizes = ", ".join(str(n) for n in larger)
            lines.append(f"- {_label(tool)} not run at N = {sizes}: {why}.")
    lines += [f"- Note: {note}" for note in results.notes]
    lines += [
        "",
        "### Wall time, s (median [min–max])",
        "",
        *_metric_table(results, "wall"),
        "",
        "### Client CPU-seconds (median; per host)",
        "",
        *_metric_table(results, "cpu"),
        "",
        "### Client memory per host, MiB (median of the peak; in all)",
        "",
        *_metric_table(results, "memory"),
        "",
        "### Ratios (of medians, same run)",
        "",
        f"met / **missed**: issue 33's target, pyinfra's change run at least {TARGET:g}× "
        f"`deploy`'s at N ≥ {TARGET_HOSTS} (wall time).",
        "",
        *table(
            ["ratio", "of", *[_column(p, n) for p, n in _columns(results)]], _ratio_rows(results)
        ),
        "",
        "Share of its cores each tool kept busy (CPU-seconds ÷ wall time ÷ the cores it may "
        "use; median over runs):",
        "",
        *table(
            ["tool", "run", *[_column(p, n) for p, n in _columns(results)]], _busy_rows(results)
        ),
        "",
    ]
    lines += _can_and_cannot(results)
    failures = [
        [_label(k[1]), _column(k[0], k[2]), KIND_LABEL[k[3]], text.replace("|", "/")[:300]]
        for k, s in sorted(results.series.items())
        for text in [*s.failures, *s.wrong]
    ]
    if failures:
        lines += ["### Failures", "", *table(["tool", "where", "run", "what"], failures), ""]
    return "\n".join(lines).rstrip() + "\n"


def splice(page: str, section: str) -> str:
    """``page`` with its "Fleet scale" section replaced by ``section`` (up to the next ``## ``
    heading), or, if it has none, ``section`` put before "## Ablation" or at the end."""
    start = page.find("\n" + HEADING)
    if start >= 0:
        end = page.find("\n## ", start + 1)
        rest = page[end + 1 :] if end >= 0 else ""
        return page[: start + 1] + section + ("\n" + rest if rest else "")
    before = page.find("\n## Ablation")
    if before >= 0:
        return page[: before + 1] + section + "\n" + page[before + 1 :]
    return page.rstrip("\n") + "\n\n" + section
