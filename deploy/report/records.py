"""Human renderings of what is recorded: ``deploy history``, ``deploy status`` and the
question ``deploy rollback`` asks. Fitted to the terminal as `deploy.report.text` says: a run
id and a host name are never cut (they are typed back), what does not fit moves to
``deploy show`` and ``--json``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from deploy.engine.results import EXIT_BY_OUTCOME, RunResult
from deploy.errors import SEVERITY
from deploy.report.text import (
    own,
    shorten_end,
    shorten_middle,
    table_lines,
    terminal_width,
    wrap,
    wrap_items,
)

if TYPE_CHECKING:
    from deploy.engine.rollback_target import RollbackTarget
    from deploy.engine.status import HostStatus


def _counts(run: RunResult) -> str:
    """``2 changed``, ``1 rolled back, 3 changed``: the hosts by outcome, worst first (the
    order of exit codes: 3, then 1, then 4, then 0)."""
    counts = Counter(h.outcome for h in run.hosts)
    order = sorted(counts, key=lambda o: (-SEVERITY.get(EXIT_BY_OUTCOME.get(o, 0), 0), o))
    return ", ".join(f"{counts[o]} {o}" for o in order) or "-"


def render_history(
    runs: list[RunResult], host: str | None = None, *, width: int | None = None
) -> str:
    """One row per run, oldest first; with ``host``, that host's outcome in each run.

    The hosts of a run are named with their outcomes when that fits the width, else counted
    by outcome (``deploy show RUN`` names them); the start time and duration are left out
    before anything is cut (the run id begins with the start, in UTC).
    """
    if not runs:
        return f"no runs recorded for {host}" if host else "no runs recorded yet"
    width = width or terminal_width()

    def rows(named: bool) -> list[list[str]]:
        out = []
        for run in runs:
            if host is not None:
                last = next((h.outcome for h in run.hosts if h.host == host), "-")
            elif named:
                last = ", ".join(f"{h.host}={h.outcome}" for h in run.hosts) or "-"
            else:
                last = _counts(run)
            out.append(
                [
                    run.run_id,
                    run.started.replace("+00:00", "Z"),
                    run.command,
                    run.playbook or "-",
                    str(run.exit_code),
                    f"{run.duration:.1f} s",
                    last,
                ]
            )
        return out

    headers = [
        "RUN",
        "STARTED",
        "COMMAND",
        "PLAYBOOK",
        "EXIT",
        "TIME",
        "OUTCOME" if host else "HOSTS",
    ]
    named = rows(True)
    if width is not None and host is None:
        widest = [max(len(r[i]) for r in [headers, *named]) for i in (0, 2, 3, 4, 6)]
        if sum(widest) + 2 * 4 > width:  # names do not fit even without start and time
            named = rows(False)
    return "\n".join(table_lines(headers, named, optional=(1, 5), wrap_last=True, width=width))


def render_status(statuses: list[HostStatus], *, width: int | None = None) -> str:
    """``deploy status``: per host a line (lock, service health), its last run below, then
    the details that need words (a held lock, unfinished runs), wrapped under the host."""
    width = width or terminal_width()
    out: list[str] = []
    for status in statuses:
        if not status.reachable:
            out.append(f"{status.host}: UNREACHABLE")
        else:
            items = [f"lock {status.lock}"] + ([status.health] if status.health != "-" else [])
            out.extend(wrap_items(items, width, f"{status.host}: ", "  "))
        if status.error:
            out.extend(wrap(own(status.host, status.error), width, "  ", "    "))
        last = status.last_run
        if last is not None:
            out.extend(
                wrap(f"{last.run_id} ({last.playbook or '?'}): {last.state}", width, "  last run ")
            )
        elif status.reachable and not status.error:
            out.append("  no run recorded on the host")
        if status.lock in ("held", "stale"):
            out.extend(wrap(status.describe_lock(), width, "  lock ", "    "))
        for run in status.unfinished:
            what = (
                f"`deploy rollback {run.run_id}` finishes undoing it (`deploy apply` leaves "
                "this host alone until then)"
                if run.state == "rollback incomplete"
                else "it is not retried: a human brings the host back, then "
                f"`deploy resolve {run.run_id} -m WHY` (apply and rollback refuse until then)"
                if run.state == "undo failed"
                else f"the next `deploy apply` on this host (or `deploy rollback {run.run_id}`) "
                "undoes it first"
            )
            text = (
                f"run {run.run_id} ({run.playbook or '?'} by {run.user or '?'}, "
                f"{run.since or '?'}) is {run.state}; {what}"
            )
            out.extend(wrap(text, width, "  ", "    "))
    return "\n".join(out)


def render_rollback_question(target: RollbackTarget, *, width: int | None = None) -> str:
    """The confirmation ``deploy rollback`` asks: run, playbook, start, hosts, files, services.

    Host names are listed whole (wrapped); a file path that does not fit is shortened in the
    middle (``deploy show RUN`` has it whole), a service step's title at its end.
    """
    width = width or terminal_width()
    run = target.recorded
    names = [name for name, _ in target.hosts] or ["(none)"]
    if run is None:
        lines = wrap_items(
            names, width, f"Roll back run {target.run_id} (not in this workstation's history) on "
        )
        lines[-1] += "?"
        lines += wrap("Each host undoes whatever its journal of that run records.", width)
        return "\n".join(lines)
    from deploy.engine.rollback_target import SERVICE_STEPS

    touched = {name for name, _ in target.hosts}
    files = sorted({f for h in run.hosts if h.host in touched for f in h.changed_files})
    services: dict[str, list[str]] = {}
    for h in run.hosts:
        for s in h.steps:
            if h.host in touched and s.kind in SERVICE_STEPS and s.status in ("ok", "changed"):
                services.setdefault(s.title, []).append(h.host)
    pad = " " * 12
    lines = [f"Roll back run {run.run_id}"]
    lines += wrap(f"{run.playbook or '-'}, started {run.started}", width, "  playbook: ", pad)
    lines += wrap_items(names, width, "  hosts:    ", pad)
    room = None if width is None else max(width - len(pad), 20)
    shown = [path if room is None else shorten_middle(path, room) for path in files or ["-"]]
    if len(set(shown)) < len(shown):  # shortened alike: the names, and where the paths are
        bases = sorted({path.rsplit("/", 1)[-1] for path in files})
        text = f"{len(files)} files: {', '.join(bases)} (`deploy show {run.run_id}` lists them)"
        lines += wrap(text, width, "  files:    ", pad)
    else:
        lines += [f"{'  files:    ' if i == 0 else pad}{path}" for i, path in enumerate(shown)]
    if not services:
        lines.append("  services: -")
    for index, (title, hosts) in enumerate(services.items()):
        where = "" if set(hosts) == touched else f" on {', '.join(hosts)}"
        short = title if room is None else shorten_end(title, room)
        lines.append(f"{'  services: ' if index == 0 else pad}{short}")
        lines += wrap(f"(restarted as it ran before{where})", width, pad)
    unknown = [h.host for h in run.hosts if h.host in touched and h.outcome == "interrupted"]
    if unknown:
        lines += wrap_items(unknown, width, "  not finished on ", pad)
        lines += wrap("its journal there says what to undo", width, pad)
    if target.missing:
        lines += wrap_items(
            target.missing, width, "  not reached (not in this inventory or --limit): ", pad
        )
    return "\n".join([*lines, "Proceed?"])
