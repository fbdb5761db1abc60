"""``docs/performance.md``, rendered from the measurements — never written by hand.

Every number in the page comes from the run that wrote it, together with the versions and the
machine, so that a reader can tell a regression from a different laptop. Ratios use medians:
one slow outlier does not move them, and they are closer than the minimum to what an operator
sees on an ordinary day.
"""

from __future__ import annotations

import os
import statistics

from bench import targets, wire
from bench.deploybuild import BASELINE
from bench.markdown import KIND_LABEL, column, table
from bench.report_deploy import profiles, round_trips
from bench.report_targets import targets_section
from bench.report_usage import usage_section
from bench.results import Results
from bench.runner import Series
from bench.toolchain import REQUIREMENTS
from bench.tools import KEX
from bench.window import MSS

#: Start-up of the commands that contact no host (issue 6).
TARGET_STARTUP = 0.3
TOOL_LABEL = {
    "floor": "floor",
    "floor-nodelay": "floor, TCP_NODELAY",
    "fabric": "plain Fabric script",
}
#: A 1-minute load average above this share of the cores makes the page say it was loaded.
LOADED = 0.5


def _label(results: Results, tool: str) -> str:
    if tool == BASELINE:
        return f"`deploy` at `{results.baseline_ref}` (baseline)"
    return TOOL_LABEL.get(tool, f"`{tool}`")


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


def _seconds(results: Results) -> list[str]:
    columns = results.columns()
    rows = []
    for tool in results.tools:
        kinds = ("connect",) if tool.startswith("floor") else ("change", "rerun")
        for kind in kinds:
            cells = [_cell(results.series.get((tool, n, rtt, kind))) for rtt, n in columns]
            rows.append([_label(results, tool), KIND_LABEL[kind], *cells])
    header = ["tool", "run", *[column(r, n) for r, n in columns]]
    picture = []
    if results.plot:
        picture = [
            f"![seconds against RTT and against N, one line per tool]({results.plot})",
            "",
        ]
    return [
        "## Seconds",
        "",
        f"Wall time of the whole process, min / median of {results.repeat} runs (after one "
        "untimed warm-up round at the first size); files reset before every change run, "
        "outside the timing. **loopback** is straight to the sshd daemons; **RTT R ms** is "
        "through `bench/delay.py`, a TCP forwarder on 127.0.0.1 that holds every chunk R/2 ms "
        "in each direction (in order, the two directions independent, no bandwidth cap) — "
        "every tool, the floor included, reaches the hosts through it"
        f"{_window_words(results.initial_window)}. "
        '"floor, TCP_NODELAY" is the floor with Nagle\'s algorithm off, as `deploy` '
        "connects (paramiko leaves it on, and its login then waits ~40 ms for a delayed ACK); "
        "both floors still wait ~40 ms more for the first channel (sshd holds its confirmation "
        "until the client ACKs its host-keys notice), which `deploy` does not "
        "(`deploy/remote/connect.py`, `Wire`): "
        "the targets are set against the plain floor, and the ratio to this one says "
        "how much of `deploy`'s lead that one socket option is. "
        "A tool whose result failed the `ast` check is marked **WRONG** instead of timed; "
        "† counts runs that exited non-zero (not samples; see Failures), and re-runs not "
        "made because that round's change run failed.",
        "",
        *picture,
        *table(header, rows),
        "",
    ]


def _failures(results: Results) -> list[str]:
    """Every run that exited non-zero or lied, with the lines of output that say why."""
    rows = []
    for (tool, count, rtt, kind), series in sorted(results.series.items()):
        for text in series.failures:
            rows.append([f"`{tool}`", column(rtt, count), KIND_LABEL[kind], "failed", text])
        for text in series.wrong:
            rows.append([f"`{tool}`", column(rtt, count), KIND_LABEL[kind], "WRONG", text])
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
        *table(["tool", "where", "run", "", "round: what the output says"], rows),
        "",
    ]


def _ratios(results: Results) -> list[str]:
    columns = results.columns()
    m = results.median
    specs = [
        ("`deploy` change ÷ floor", "deploy", "change", "floor", "connect"),
        ("`deploy` re-run ÷ floor", "deploy", "rerun", "floor", "connect"),
        ("`deploy` change ÷ floor, TCP_NODELAY", "deploy", "change", "floor-nodelay", "connect"),
        ("`deploy` re-run ÷ floor, TCP_NODELAY", "deploy", "rerun", "floor-nodelay", "connect"),
        ("`deploy` change ÷ Fabric script change", "deploy", "change", "fabric", "change"),
        ("`deploy` re-run ÷ Fabric script re-run", "deploy", "rerun", "fabric", "rerun"),
        ("Fabric script change ÷ floor", "fabric", "change", "floor", "connect"),
        ("Fabric script re-run ÷ floor", "fabric", "rerun", "floor", "connect"),
        ("`deploy` change ÷ baseline change", "deploy", "change", BASELINE, "change"),
        ("`deploy` re-run ÷ baseline re-run", "deploy", "rerun", BASELINE, "rerun"),
        ("baseline change ÷ floor", BASELINE, "change", "floor", "connect"),
        ("baseline re-run ÷ floor", BASELINE, "rerun", "floor", "connect"),
        ("ansible change ÷ `deploy` change", "ansible", "change", "deploy", "change"),
        ("ansible re-run ÷ `deploy` re-run", "ansible", "rerun", "deploy", "rerun"),
        ("pyinfra change ÷ `deploy` change", "pyinfra", "change", "deploy", "change"),
        ("pyinfra re-run ÷ `deploy` re-run", "pyinfra", "rerun", "deploy", "rerun"),
        # The most "anchor ÷ deploy" can be here: what a tool exactly at the floor would score.
        ("ansible change ÷ floor", "ansible", "change", "floor", "connect"),
        ("ansible re-run ÷ floor", "ansible", "rerun", "floor", "connect"),
        ("pyinfra change ÷ floor", "pyinfra", "change", "floor", "connect"),
        ("pyinfra re-run ÷ floor", "pyinfra", "rerun", "floor", "connect"),
    ]
    verdicts = {(c.target, c.rtt, c.hosts, c.kind): c.met for c in targets.checks(results)}
    target_of = {"floor": "deploy ÷ floor", "fabric": "deploy ÷ Fabric script"}
    rows = []
    for label, top, top_kind, bottom, bottom_kind in specs:
        if top not in results.tools or bottom not in results.tools:
            continue
        cells = []
        for rtt, n in columns:
            cell = _ratio(m(top, n, rtt, top_kind), m(bottom, n, rtt, bottom_kind))
            if top == "deploy":
                name = target_of.get(bottom, "")
            else:  # an anchor's ratio to deploy is a target; to the floor, only its ceiling
                name = f"{top} ÷ deploy" if bottom == "deploy" else ""
            met = verdicts.get((name, rtt, n, top_kind))
            if met is not None:
                cell += " met" if met else " **missed**"
            cells.append(cell)
        rows.append([label, *cells])
    paired = [_paired(results, rtt, n) for rtt, n in columns]
    if any(cell != "—" for cell in paired):
        rows.append(["`deploy` re-run − change run, same round (median ms)", *paired])
    return [
        "## Ratios (of medians)",
        "",
        "Ratios of medians measured in the same run, tool after tool: they hold where the "
        "absolute seconds drift with the machine's load. met / **missed** mark issue 17's "
        "targets (listed under Targets below).",
        "",
        *table(["ratio", *[column(r, n) for r, n in columns]], rows),
        "",
    ]


def _paired(results: Results, rtt: int, n: int) -> str:
    """The median over rounds of (re-run − change run) of ``deploy``, in ms.

    The two runs of a round follow each other, so a slow minute of the machine hits both:
    the paired difference shows what the re-run saves even where the spread of either
    median is larger than the saving (N = 1 on a shared machine: issue 17's "re-run slower
    than the change run" was that spread).
    """
    change = results.series.get(("deploy", n, rtt, "change"))
    rerun = results.series.get(("deploy", n, rtt, "rerun"))
    if change is None or rerun is None or not change.seconds:
        return "—"
    if len(change.seconds) != len(rerun.seconds):
        return "—"  # a failed round unpairs them
    gaps = [b - a for a, b in zip(change.seconds, rerun.seconds, strict=True)]
    return f"{statistics.median(gaps) * 1000:+.0f}"


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
        *table(["command", "seconds", "target", ""], rows),
        "",
    ]


def _facts(results: Results) -> list[str]:
    rows = [[k, v] for k, v in results.facts.items()]
    rows += [[f"load average (1/5/15 min) before N = {n}", v] for n, v in results.load.items()]
    return ["## Versions and machine", "", *table(["", ""], rows), ""]


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


def _loaded(results: Results) -> list[str]:
    """A warning at the top when other work kept the cores busy during the run."""
    cores = os.cpu_count() or 1
    readings = [
        results.facts.get("load average (1/5/15 min) at start", ""),
        results.facts.get("load average (1/5/15 min) at end", ""),
        *results.load.values(),
    ]
    first = []
    for text in readings:
        try:
            first.append(float(text.split("/")[0]))
        except ValueError:
            continue
    if not first or max(first) <= LOADED * cores:
        return []
    return [
        f"> **The machine was loaded during this run**: 1-minute load average up to "
        f"{max(first):.2f} on {cores} cores (other work shared them; see Versions and "
        "machine). The absolute seconds are noisy and slower than on an idle machine; "
        "rely on the ratios, whose two sides were measured in turn in the same rounds.",
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
    lines += _loaded(results)
    if results.skipped or results.skipped_rtt:
        lines += [
            *[
                f"- N = {n} not measured: {why}." if n else f"- Incomplete: {why}."
                for n, why in sorted(results.skipped.items())
            ],
            *[
                f"- {column(rtt, n)} not measured: {why}."
                for (n, rtt), why in sorted(results.skipped_rtt.items())
            ],
            "",
        ]
    if results.notes:
        lines += [*[f"- Note: {note}" for note in results.notes], ""]
    lines += _seconds(results)
    lines += usage_section(results, {tool: _label(results, tool) for tool in results.tools})
    lines += _ratios(results)
    lines += targets_section(results)
    lines += _failures(results)
    lines += _startup(results)
    lines += round_trips(results)
    lines += wire.render(results.wire, results.wire_rtt)
    lines += profiles(results)
    lines += _facts(results)
    lines += _method(results)
    return "\n".join(lines).rstrip() + "\n"


def _window_words(segments: int) -> str:
    """How the proxy treats a burst, for the Seconds paragraph."""
    if not segments:
        return " (no congestion window modelled: a burst of any size crosses in one RTT)"
    return (
        f", and each connection's TCP congestion window starts at {segments} segments of "
        f"{MSS} bytes and grows by slow start as ACKs come back one RTT later, as Linux "
        "runs a fresh connection (`bench/window.py`): a burst larger than the window "
        "waits a round trip per doubling, as on a real WAN, where loopback and a bare "
        "delay let it through at once"
    )
