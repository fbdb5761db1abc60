"""The ``deploy``-only sections of docs/performance.md: its round trips and where its time goes.

Measured on loopback after the timed rounds (``deploy --json`` operation counts and one
instrumented run of each kind, `bench.profile`), so the page can say *why* a run costs what
it does, not only how long it took.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from bench.budget import BUDGET_FILE
from bench.markdown import KIND_LABEL, table
from bench.results import Results


def _ops_summary(entries: list[dict[str, Any]], key: str) -> str:
    values = sorted({int(e.get(key, 0)) for e in entries})
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"


def round_trips(results: Results) -> list[str]:
    rows = []
    for kind in ("change", "rerun"):
        allowed = results.budget.get(kind, {})
        for count in results.sizes:
            entries = results.ops.get((count, kind))
            if not entries:
                continue
            outcomes = ", ".join(sorted({str(e["outcome"]) for e in entries}))
            rows.append(
                [
                    KIND_LABEL[kind],
                    str(count),
                    outcomes,
                    _ops_summary(entries, "exec"),
                    _ops_summary(entries, "cmd"),
                    _ops_summary(entries, "sftp"),
                    str(allowed.get("exec", "—")),
                    str(allowed.get("cmd", "—")),
                    str(allowed.get("sftp", "—")),
                ]
            )
    wire_rows = []
    for (count, kind), document in sorted(results.profiles.items()):
        per_host = {k: v / count for k, v in document.get("wire", {}).items()}
        by_type = {k.removeprefix("sftp "): v for k, v in per_host.items() if k.startswith("sftp ")}
        wire_rows.append(
            [
                KIND_LABEL[kind],
                str(count),
                f"{per_host.get('channel opened', 0):g}",
                f"{sum(by_type.values()):g}",
                f"{per_host.get('waited sftp requests', 0):g}",
                ", ".join(f"{k} {v:g}" for k, v in sorted(by_type.items())),
            ]
        )
    lines = [
        "## Round-trip budget",
        "",
        "Round trips are the cost on a real network. Each **exec** opens a channel and starts "
        "the user's login shell on the host — its `.bashrc` included (root's runs `pyenv "
        "init`: see the unit prices below) — while an **SFTP** request is served inside the "
        "already running SFTP server, with no shell (the sandbox's sshd serves SFTP "
        "in-process, `internal-sftp`; where a host's sshd runs `sftp-server` instead, that "
        "starts through the login shell once per connection). So `deploy` starts one login "
        "shell per host, the one that takes the lock, which then runs the run's other "
        "commands as **cmd**s — no new shell (`deploy/remote/session.py`): the compile "
        "check, and reading a file a command may have changed. The files the first steps "
        "read (status and bytes) come with the lock's own exec. Writes, saved copies and "
        "journal records go to the host's file helper in the lock's shell "
        "(`deploy/hostpy/fileagent.py`), sent without waiting, and so do the compile check of "
        "the new bytes and the commit behind it, which the host writes only if everything "
        "before it succeeded (`deploy/engine/verdicts.py`): a change run waits once after the "
        "lock's answer. SFTP serves only what takes no lock (the reads of "
        "`--check` where python3 is missing, `deploy status`), so these runs open none. "
        "On loopback the hosts' "
        "shells also run on the workstation's cores, so at N = 20 and 50 every exec competes "
        "with the tools themselves for CPU.",
        "",
        "SSH operations per host as `deploy --json` counts them (`hosts[].ops`). The budget is "
        f"defined once, in `{BUDGET_FILE.relative_to(BUDGET_FILE.parents[2])}` "
        "(`CHANGE_RUN_BUDGET`, `RERUN_BUDGET`), which fails when a change adds round trips; "
        "this page reads it from there.",
        "",
        *table(
            [
                "run",
                "N",
                "outcome",
                "exec",
                "cmd",
                "sftp",
                "exec budget",
                "cmd budget",
                "sftp budget",
            ],
            rows,
        ),
        "",
    ]
    if results.prices:
        lines += [
            "Unit prices on this machine (`bench/costs.py`, medians over one open connection "
            "to a sandbox host; the last two rows run on the workstation without SSH):",
            "",
            *table(["operation", "ms"], [[k, f"{v:.1f}"] for k, v in results.prices.items()]),
            "",
        ]
    if wire_rows:
        lines += [
            "What really crossed the connection, per host, counted inside paramiko during the "
            "profiled runs below (`bench/profile.py`): channels opened (one per exec, plus one "
            "for the SFTP session), SFTP requests by method, each waited for (file contents "
            "go through the host's file helper in the lock's session instead, see the "
            "helper's wait spans below). On a real network each waited request and "
            "each exec costs at least one round-trip time: that column times the RTT is the "
            "latency a remote fleet adds.",
            "",
            *table(["run", "N", "channels", "SFTP requests", "waited for", "by type"], wire_rows),
            "",
        ]
    return lines


def _nest(spans: list[list[Any]]) -> list[tuple[int, list[Any]]]:
    """Spans of one thread in start order, each with its depth (containment)."""
    ordered = sorted(spans, key=lambda s: (s[2], -s[3]))
    stack: list[list[Any]] = []
    nested = []
    for span in ordered:
        while stack and span[2] >= stack[-1][3]:
            stack.pop()
        nested.append((len(stack), span))
        stack.append(span)
    return nested


def _timeline(document: dict[str, Any]) -> list[str]:
    """One run on one host, span by span (imports, config, SSH, each operation), in time
    order; nesting is computed per thread, and the host's own thread is named."""
    spans = document["spans"]
    pre = max(0.0, document["wall"] - document["elapsed"])
    nested = []
    for thread in {s[0] for s in spans}:
        # A host thread works inside main's run_apply (two levels down): indent it so.
        offset = 0 if thread == "MainThread" else 2
        nested += [(d + offset, s) for d, s in _nest([s for s in spans if s[0] == thread])]
    nested.sort(key=lambda item: (item[1][2], item[0]))
    rows = [["0", f"{pre * 1000:.0f}", "", "interpreter start (before the first line of Python)"]]
    for depth, (thread, label, start, end) in nested:
        rows.append(
            [
                f"{(pre + start) * 1000:.0f}",
                f"{(end - start) * 1000:.1f}",
                "main" if thread == "MainThread" else "host",
                "&nbsp;&nbsp;" * depth * 2 + label,
            ]
        )
    rows.append([f"{document['wall'] * 1000:.0f}", "", "", "process exit (wall time)"])
    return table(["at ms", "took ms", "thread", "what"], rows)


def _per_host(document: dict[str, Any], count: int) -> list[str]:
    """Many hosts: per operation, how many per host and how long (median, slowest)."""
    spans = [s for s in document["spans"] if s[0] != "MainThread"]
    by_label: dict[str, list[float]] = defaultdict(list)
    for _, label, start, end in spans:
        by_label[label].append(end - start)
    rows = []
    for label, durations in sorted(by_label.items(), key=lambda kv: -statistics.median(kv[1])):
        rows.append(
            [
                label,
                f"{len(durations) / count:g}",
                f"{statistics.median(durations) * 1000:.1f}",
                f"{max(durations) * 1000:.1f}",
            ]
        )
    main = {s[1]: s for s in document["spans"] if s[0] == "MainThread"}
    head = []
    run = main.get("engine: run_apply (all hosts)")
    if run is not None:
        pre = max(0.0, document["wall"] - document["elapsed"])
        head = [
            f"Process wall time {document['wall']:.2f} s; the hosts' work (`run_apply`) ran "
            f"from {(pre + run[2]):.2f} s to {(pre + run[3]):.2f} s.",
            "",
        ]
    return head + table(["operation", "per host", "median ms", "slowest ms"], rows)


def profiles(results: Results) -> list[str]:
    if not results.profiles:
        return []
    lines = [
        "## Where `deploy`'s time goes",
        "",
        "One instrumented run of each kind (`bench/profile.py`: the same command, in-process, "
        "listening to the spans `deploy` emits at its wire and phase boundaries "
        "(`deploy/trace.py`), with paramiko's key exchange and authentication wrapped in "
        "timers at run time). Nested rows happen inside "
        "the row above them. Imports are timed one by one in the order the command needs "
        "them; `fabric` is imported lazily by the first connection.",
        "",
    ]
    for (count, kind), document in sorted(results.profiles.items()):
        lines += [f"### {KIND_LABEL[kind]}, N = {count}", ""]
        lines += _cpu(document)
        lines += _timeline(document) if count == 1 else _per_host(document, count)
        lines.append("")
    return lines


def _cpu(document: dict[str, Any]) -> list[str]:
    """How busy the cores were while deploy ran, and how much of that was deploy itself."""
    cpu = document.get("cpu")
    if not cpu or cpu["wall"] <= 0:
        return []
    capacity = cpu["wall"] * cpu["cores"]
    others = max(0.0, cpu["machine busy"] - cpu["deploy process"])
    return [
        f"CPU while `deploy apply` ran ({cpu['wall']:.2f} s, {cpu['cores']} cores): the machine "
        f"was {100 * cpu['machine busy'] / capacity:.0f} % busy; the `deploy` process itself "
        f"used {cpu['deploy process']:.2f} CPU-s, everything else — on loopback, mostly the "
        f"hosts' sshd, login shells and interpreters — {others:.2f} CPU-s.",
        "",
    ]
