"""``docs/performance.md``, rendered from the measurements — never written by hand.

Every number in the page comes from the run that wrote it, together with the versions and the
machine, so that a reader can tell a regression from a different laptop. Ratios use medians:
one slow outlier does not move them, and they are closer than the minimum to what an operator
sees on an ordinary day.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.budget import BUDGET_FILE
from bench.runner import Series
from bench.toolchain import REQUIREMENTS
from bench.tools import KEX

#: Issue 6's targets: deploy ÷ floor, and start-up of the commands that contact no host.
TARGET_CHANGE = 1.5
TARGET_RERUN = 1.3
TARGET_STARTUP = 0.3
KIND_LABEL = {"change": "change run", "rerun": "no-change re-run", "connect": "connect + `true`"}
TOOL_LABEL = {"floor": "floor", "floor-nodelay": "floor, TCP_NODELAY"}


@dataclass
class Results:
    """Everything one benchmark run measured."""

    sizes: list[int]
    tools: list[str]
    repeat: int
    command: str
    budget: dict[str, dict[str, int]]
    deploy_command: str
    series: dict[tuple[str, int, str], Series] = field(default_factory=dict)
    ops: dict[tuple[int, str], list[dict[str, Any]]] = field(default_factory=dict)
    profiles: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    cli: dict[str, Series] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    spent: dict[int, float] = field(default_factory=dict)
    prices: dict[str, float] = field(default_factory=dict)
    #: Fleet size -> the load averages when its measurements began.
    load: dict[int, str] = field(default_factory=dict)

    def all_ok(self) -> bool:
        """No wrong result, no failed run, nothing missing: the exit status of the bench."""
        every = [*self.series.values(), *self.cli.values()]
        return all(s.ok and not s.failures for s in every) and not self.skipped

    def median(self, tool: str, count: int, kind: str) -> float | None:
        found = self.series.get((tool, count, kind))
        return found.median if found is not None and found.ok else None


def _cell(series: Series | None) -> str:
    """``min / median``, or WRONG; failed runs are counted here and explained under Failures."""
    if series is None:
        return "—"
    if series.wrong:
        return "**WRONG**: " + series.wrong[0].replace("|", "/")
    text = f"{series.min:.2f} / {series.median:.2f}" if series.seconds else "—"
    notes = []
    if series.failures:
        notes.append(f"{len(series.failures)} failed")
    if series.skipped:
        notes.append(f"{series.skipped} not run")
    return text + (f" ({', '.join(notes)}†)" if notes else "")


def _ratio(top: float | None, bottom: float | None) -> str:
    return "—" if top is None or bottom is None or bottom == 0 else f"{top / bottom:.2f}×"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _seconds(results: Results) -> list[str]:
    sizes = results.sizes
    rows = []
    for tool in results.tools:
        kinds = ("connect",) if tool in TOOL_LABEL else ("change", "rerun")
        for kind in kinds:
            cells = [_cell(results.series.get((tool, n, kind))) for n in sizes]
            rows.append([TOOL_LABEL.get(tool, f"`{tool}`"), KIND_LABEL[kind], *cells])
    header = ["tool", "run", *[f"N = {n}" for n in sizes]]
    return [
        "## Seconds",
        "",
        f"Wall time of the whole process, min / median of {results.repeat} runs (after one "
        "untimed warm-up round at the first size); files reset before every change run, "
        "outside the timing. "
        '"floor, TCP_NODELAY" is the floor with Nagle\'s algorithm off, as `deploy` '
        "connects (paramiko leaves it on, and its login then waits ~40 ms for a delayed ACK): "
        "the issue's targets are set against the plain floor, and the ratio to this one says "
        "how much of `deploy`'s lead that one socket option is. "
        "A tool whose result failed the `ast` check is marked **WRONG** instead of timed; "
        "† counts runs that exited non-zero (not samples; see Failures), and re-runs not "
        "made because that round's change run failed.",
        "",
        *_table(header, rows),
        "",
    ]


def _failures(results: Results) -> list[str]:
    """Every run that exited non-zero or lied, with the lines of output that say why."""
    rows = []
    for (tool, count, kind), series in sorted(results.series.items()):
        for text in series.failures:
            rows.append([f"`{tool}`", str(count), KIND_LABEL[kind], "failed", text])
        for text in series.wrong:
            rows.append([f"`{tool}`", str(count), KIND_LABEL[kind], "WRONG", text])
    for label, series in results.cli.items():
        rows += [[f"`deploy {label}`", "", "", "failed", text] for text in series.failures]
    if not rows:
        return []
    rows = [[*row[:4], row[4].replace("|", "/")[:400]] for row in rows]
    return [
        "## Failures",
        "",
        "Runs that exited non-zero (failed, including the untimed warm-up round) or exited 0 "
        "with a wrong result. A failure is a finding, not noise: each one is a run an operator "
        "would have had to look at.",
        "",
        *_table(["tool", "N", "run", "", "round: what the output says"], rows),
        "",
    ]


def _ratios(results: Results) -> list[str]:
    sizes = results.sizes
    m = results.median
    specs = [
        ("`deploy` change ÷ floor", "deploy", "change", "floor", "connect", f"≤ {TARGET_CHANGE}×"),
        ("`deploy` re-run ÷ floor", "deploy", "rerun", "floor", "connect", f"≤ {TARGET_RERUN}×"),
        (
            "`deploy` change ÷ floor, TCP_NODELAY",
            "deploy",
            "change",
            "floor-nodelay",
            "connect",
            "",
        ),
        ("`deploy` re-run ÷ floor, TCP_NODELAY", "deploy", "rerun", "floor-nodelay", "connect", ""),
        ("ansible change ÷ `deploy` change", "ansible", "change", "deploy", "change", ""),
        ("ansible re-run ÷ `deploy` re-run", "ansible", "rerun", "deploy", "rerun", ""),
        ("pyinfra change ÷ `deploy` change", "pyinfra", "change", "deploy", "change", ""),
        ("pyinfra re-run ÷ `deploy` re-run", "pyinfra", "rerun", "deploy", "rerun", ""),
    ]
    limits = {"change": TARGET_CHANGE, "rerun": TARGET_RERUN}
    rows = []
    for label, top, top_kind, bottom, bottom_kind, target in specs:
        if top not in results.tools or bottom not in results.tools:
            continue
        cells = []
        for n in sizes:
            high, low = m(top, n, top_kind), m(bottom, n, bottom_kind)
            cell = _ratio(high, low)
            if bottom == "floor" and top == "deploy" and high is not None and low:
                cell += " met" if high / low <= limits[top_kind] else " **missed**"
            cells.append(cell)
        rows.append([label, *cells, target])
    return [
        "## Ratios (of medians)",
        "",
        "Issue 6's targets: `deploy`'s change run at most 1.5 × the floor and its re-run at most "
        "1.3 ×, at N = 1 and N = 20.",
        "",
        *_table(["ratio", *[f"N = {n}" for n in sizes], "target"], rows),
        "",
    ]


def _startup(results: Results) -> list[str]:
    if not results.cli:
        return []
    rows = []
    for label, series in results.cli.items():
        verdict = "—"
        if series.ok:
            verdict = "met" if series.median < TARGET_STARTUP else "**missed**"
        rows.append([f"`deploy {label}`", _cell(series), f"< {TARGET_STARTUP} s", verdict])
    return [
        "## Start-up: commands that contact no host",
        "",
        f"`deploy --help` and `deploy validate` (the inventory above, `playbooks/`), "
        f"min / median of {len(next(iter(results.cli.values())).seconds)} runs.",
        "",
        *_table(["command", "seconds", "target", ""], rows),
        "",
    ]


def _ops_summary(entries: list[dict[str, Any]], key: str) -> str:
    values = sorted({int(e.get(key, 0)) for e in entries})
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"


def _round_trips(results: Results) -> list[str]:
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
        "commands as **cmd**s — no new shell, one round trip each "
        "(`deploy/remote/session.py`): the compile check, and reading a file a command may "
        "have changed. The files the first steps read (status and bytes) come with the "
        "lock's own exec. Writes and renames go over SFTP, which a re-run that changes "
        "nothing never opens. On loopback the hosts' "
        "shells also run on the workstation's cores, so at N = 20 and 50 every exec competes "
        "with the tools themselves for CPU.",
        "",
        "SSH operations per host as `deploy --json` counts them (`hosts[].ops`). The budget is "
        f"defined once, in `{BUDGET_FILE.relative_to(BUDGET_FILE.parents[2])}` "
        "(`CHANGE_RUN_BUDGET`, `RERUN_BUDGET`), which fails when a change adds round trips; "
        "this page reads it from there.",
        "",
        *_table(
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
            *_table(["operation", "ms"], [[k, f"{v:.1f}"] for k, v in results.prices.items()]),
            "",
        ]
    if wire_rows:
        lines += [
            "What really crossed the connection, per host, counted inside paramiko during the "
            "profiled runs below (`bench/profile.py`): channels opened (one per exec, plus one "
            "for the SFTP session), SFTP requests by type, and how many of them were waited "
            "for one by one (a pipelined read or write of the ~50 KB file sends several "
            "READ/WRITE requests without waiting). On a real network each waited request and "
            "each exec costs at least one round-trip time: that column times the RTT is the "
            "latency a remote fleet adds.",
            "",
            *_table(["run", "N", "channels", "SFTP requests", "waited for", "by type"], wire_rows),
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
    return _table(["at ms", "took ms", "thread", "what"], rows)


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
    return head + _table(["operation", "per host", "median ms", "slowest ms"], rows)


def _profiles(results: Results) -> list[str]:
    if not results.profiles:
        return []
    lines = [
        "## Where `deploy`'s time goes",
        "",
        "One instrumented run of each kind (`bench/profile.py`: the same command, in-process, "
        "with deploy's network calls and paramiko's key exchange and authentication wrapped "
        "in timers at run time; `deploy` itself is not modified). Nested rows happen inside "
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


def _facts(results: Results) -> list[str]:
    rows = [[k, v] for k, v in results.facts.items()]
    rows += [[f"load average (1/5/15 min) before N = {n}", v] for n, v in results.load.items()]
    return ["## Versions and machine", "", *_table(["", ""], rows), ""]


def _method(results: Results) -> list[str]:
    return [
        "## How it is measured",
        "",
        "- **The task** (issue 6): back up SGLang 0.5.9's real `kimi_k25.py` (from the PyPI "
        "wheel), insert the three EAGLE-3 methods *inside* `KimiK25ForConditionalGeneration`, "
        "check that it compiles with the host's interpreter, check that the last line is still "
        "`EntryClass = [KimiK25ForConditionalGeneration]`. All tools insert the same bytes "
        "(read from `playbooks/kimi-eagle3.yaml`).",
        f"- **`deploy`**: `{results.deploy_command} --forks N` (the service steps — restart, "
        "readiness, smoke, throughput gate — are out of scope: the sandbox hosts run no "
        "SGLang server; when the playbook has no `service` step the option is left out, as "
        "deploy rejects an unused tag). `--forks N` because deploy's default is 10 hosts at "
        "a time while the other tools are given N.",
        "- **ansible-core**: `ansible-playbook --forks N` of an equivalent playbook: "
        "`blockinfile` (`insertbefore` the EntryClass line, `backup: true`, `validate: python "
        "-m py_compile %s`), then `command: tail -n 1` with `failed_when`. No fact gathering, "
        "`pipelining = True`, ControlMaster/ControlPersist on (a fresh control directory per "
        "run; masters closed after the run, untimed). Its OpenSSH client runs with "
        f"`-F /dev/null`, the sandbox key and known_hosts (strict), and "
        f"**`KexAlgorithms={KEX}`**: OpenSSH's default post-quantum key exchange costs "
        "~70 ms of CPU per connection that paramiko-based tools do not pay; pinning "
        "curve25519 puts every tool on the same footing.",
        "- **pyinfra**: `pyinfra inventory.py deploy.py -y --parallel N`: `files.block` "
        "(`before=True`, `line=` the EntryClass line, `backup=True`), then one `server.shell` "
        "running `python -m py_compile` and the last-line test (pyinfra has no "
        "validate-before-replace). Paramiko underneath, host keys checked "
        "(`ssh_strict_host_key_checking: yes`), no agent, no key search.",
        "- **floor**: `python bench/floor.py` — paramiko connect + `true` + close on every host "
        "in threads, host keys checked. The least a paramiko tool can do with one exec per host.",
        "- **State between runs**: before each change run every host's file is reset and "
        "`deploy`'s `state_dir` removed (untimed), so each change run compiles the new file "
        "for real. The re-run that follows finds that check recorded (`state_dir/compiled`: "
        "same file bytes, same interpreter binary; `compile_cache` in docs/playbooks.md) and "
        "does not start the host's interpreter again — as ansible's `validate`, which only "
        "runs when the file changes; pyinfra's `server.shell` compiles on every run.",
        "- **Checks, untimed**: after each change run every host's file is parsed with `ast` "
        "(the three methods in the class, none at module level, `EntryClass` still the last "
        "statement and line) and a backup holding the original bytes must exist; after each "
        "re-run no file byte and no backup may have changed.",
        "- Every process runs with a throwaway HOME (no `~/.ssh`, no agent), `NO_COLOR=1`, "
        "output to a pipe. Runs are interleaved tool by tool, so a slow moment of the machine "
        "hits all tools alike. The hosts are real `sshd` daemons on 127.0.0.1 "
        "(`deploy.sandbox.sshd`), serving root's real login shell.",
        f"- The anchors come from a cached venv (`~/.cache/deploy/bench-venv`, "
        f"{', '.join(REQUIREMENTS)}), on the same Python as `deploy`.",
        "",
    ]


def render(results: Results) -> str:
    """The whole page."""
    facts = results.facts
    lines = [
        "# Performance",
        "",
        f"<!-- Generated by `{results.command}` (bench/). Do not edit by hand: run it again. -->",
        "",
        f"Measured {facts.get('date (UTC)', '?')} UTC on {facts.get('machine', '?')}. "
        "Regenerate with:",
        "",
        "```",
        results.command,
        "```",
        "",
    ]
    if results.skipped:
        lines += [
            *[f"- N = {n} not measured: {why}." for n, why in sorted(results.skipped.items())],
            "",
        ]
    if results.notes:
        lines += [*[f"- Note: {note}" for note in results.notes], ""]
    lines += _seconds(results)
    lines += _ratios(results)
    lines += _failures(results)
    lines += _startup(results)
    lines += _round_trips(results)
    lines += _profiles(results)
    lines += _facts(results)
    lines += _method(results)
    return "\n".join(lines).rstrip() + "\n"
