"""``docs/operations.md``: a run's life, rollback, recovery, scheduling, state, exit codes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from deploy import errors, jobenv, masking, schema
from deploy import schedule as scheduling
from deploy.checks import interpreter
from deploy.config import inventory as inventory_models
from deploy.engine import (
    batches,
    fleet,
    history,
    host_run,
    journal,
    local_lock,
    rollback,
    rollback_target,
    shards,
    workers,
)
from deploy.engine import resolve as resolve_engine
from deploy.engine import status as host_status
from deploy.remote import become, hostfiles, lock
from deploy.services import dropin as service_dropin
from deploy.services import identity as service_identity
from deploy.services import prechecks
from deploy.services import state as service_state
from deploy.statedir import layout, records, runs, trust
from tools.docgen_markdown import _NOTICE, _cell, markdown

# --- docs/operations.md -----------------------------------------------------------------------


def _error_classes() -> list[type[errors.DeployError]]:
    """Every `DeployError` subclass the library defines, in a stable order.

    The library's modules are imported first, so the list does not depend on what happened
    to be imported before (and classes defined by tests are left out).
    """
    import deploy

    skip = ("deploy.sandbox", "deploy.demo", "deploy.cli")
    for info in pkgutil.walk_packages(deploy.__path__, "deploy."):
        if not info.name.startswith(skip):
            importlib.import_module(info.name)
    found: list[type[errors.DeployError]] = []
    pending: list[type[errors.DeployError]] = [errors.DeployError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(
            c
            for c in cls.__subclasses__()
            if c.__module__.startswith("deploy.") and not c.__module__.startswith(skip)
        )
    return found


def _error_tree() -> str:
    """The exception tree as nested bullets: class, exit code, module, what it means."""
    classes = _error_classes()

    def order(cls: type) -> tuple[bool, str, int]:
        return (cls.__module__ != "deploy.errors", cls.__module__, inspect.getsourcelines(cls)[1])

    def branch(cls: type[errors.DeployError], depth: int) -> list[str]:
        where = "" if cls.__module__ == "deploy.errors" else f" (`{cls.__module__}`)"
        line = (
            f"{'  ' * depth}- `{cls.__name__}`{where}, exit {cls.exit_code}: "
            f"{schema.first_paragraph(cls.__doc__)}"
        )
        children = sorted((c for c in classes if cls in c.__bases__), key=order)
        return [line, *[row for child in children for row in branch(child, depth + 1)]]

    return "\n".join(branch(errors.DeployError, 0))


def _exit_codes() -> str:
    from deploy.report.json_schema import EXIT_CODES

    names = {
        value: name
        for name, value in vars(errors).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    rows = ["| code | constant | meaning |", "| --- | --- | --- |"]
    rows += [
        f"| {code} | `{names.get(code, '')}` | {_cell(meaning)} |"
        for code, meaning in sorted(EXIT_CODES.items())
    ]
    return "\n".join(rows)


def _severity_order() -> str:
    """``3, then 1 or 2, then 4, then 0``: the order `worst_exit_code` picks codes in."""
    ranks = sorted(set(errors.SEVERITY.values()), reverse=True)
    groups = [
        " or ".join(str(c) for c in sorted(errors.SEVERITY) if errors.SEVERITY[c] == rank)
        for rank in ranks
    ]
    return ", then ".join(groups)


def _option_help(command: str, option: str) -> str:
    """The ``--help`` text of one option of ``deploy COMMAND``."""
    from deploy.cli import main

    for param in main.commands[command].params:
        if option in param.opts:
            return str(getattr(param, "help", "") or "")
    raise KeyError(f"deploy {command} has no option {option}")


def _command_help(name: str) -> str:
    """``deploy NAME``'s one-line help, as ``deploy NAME --help`` prints it."""
    from deploy.cli import main

    command = main.commands[name]
    return f"`deploy {name}`: {(command.help or '').splitlines()[0]}"


#: What to do next, per exit code: the runbook's first table (the meanings come from the
#: report's own table, `deploy.report.json_schema.EXIT_CODES`).
NEXT_STEP = {
    0: "Nothing. `deploy show RUN` has the details (diffs, figures, the server's log file).",
    1: "Read the failed step in the output (or `deploy show RUN`): every affected host is back "
    "as it was, old server serving. Fix the cause, run again.",
    2: "Fix the input named as `file:line:col field: message`; no host was contacted.",
    3: "A human must look. `deploy status` names each host's open run. An undo *cut short* "
    "(Ctrl-C twice, a killed workstation, a lost connection): `deploy rollback RUN` finishes "
    "it. An undo that *ran and failed* (its old server did not come up) is never retried: "
    "bring the host back by hand (below), then `deploy resolve RUN -m WHY`.",
    4: "The host was not touched: unreachable, a host key, sudo refused, locked by another run "
    "(named), or a check before the stop refused (drift, a draft model path, a flag the "
    "server's parser refuses). Fix what the line says, run again.",
    5: "`--check --detailed-exitcode` only: some host drifted from the playbook; nothing was "
    "changed. `deploy apply PLAYBOOK` puts it back.",
    130: "Ctrl-C at the confirmation prompt: nothing was changed.",
}


def _runbook() -> str:
    """The page's opening: what an operator on call needs, before any internals."""
    from deploy.report.json_schema import EXIT_CODES

    rows = ["| exit | meaning | what to do next |", "| --- | --- | --- |"]
    meanings = {**EXIT_CODES, 130: "interrupted at the confirmation prompt"}
    rows += [
        f"| {code} | {_cell(meanings[code])} | {_cell(NEXT_STEP[code])} |"
        for code in sorted(NEXT_STEP)
    ]
    return "\n".join(
        [
            "## Runbook (on call)",
            "",
            "### What the exit code says, and what to do next",
            "",
            *rows,
            "",
            "An interrupted run (Ctrl-C or SIGTERM, `apply` and `rollback` alike): the first",
            "signal cuts every wait short (a loading server is stopped, never waited for),",
            "starts nothing new and puts back what changed, so it ends as a failure does (1, or",
            "3 if an undo failed; hosts never started are 4). A second signal abandons at once",
            "with 3, naming the hosts left mid-run and `deploy rollback RUN`, which finishes.",
            "",
            "### Where a host was left",
            "",
            "- `deploy status`: per host, the lock (and who holds it), the last run and its",
            "  outcome, every open run (unfinished, rollback incomplete, undo failed) with the",
            "  command that closes it, and whether the service answers its health check",
            "  (`sglang_port` on loopback, else on the address the server is bound to).",
            "- `deploy show RUN` (any unique prefix or suffix of the id): the whole report of a",
            "  run recorded on this workstation; `deploy history` lists them.",
            "- On the host, `state_dir` (default `/var/lib/deploy`) keeps each run's journal",
            "  (`runs/RUN/journal.jsonl`) and the saved copies of every file it changed.",
            "",
            "### After a failed undo: `deploy resolve`",
            "",
            markdown(resolve_engine.__doc__),
            "",
            _command_help("resolve"),
            "",
            "### After a killed workstation",
            "",
            "Nothing is lost: the journal on each host says what the run changed. `deploy",
            "status` shows the run as unfinished; `deploy rollback RUN` undoes it, or the next",
            "`deploy apply` undoes it first (said in its plan). The undo stops only a server",
            "that run started (its pid and start time are journaled): if someone started a",
            "server by hand meanwhile, the undo refuses (3) and `deploy resolve RUN` closes the",
            "run once the host is as it should be.",
            "",
            "### The server's log",
            "",
            "A server deploy starts writes to `state_dir/services/NAME.log` on the host (the",
            "run's output names it: `started pid N; its log: …`); a systemd unit's goes to",
            "`journalctl -u UNIT`. A server that did not come up is reported with the last",
            "40 lines of that log.",
        ]
    )


def render_operations() -> str:
    """``docs/operations.md``: a run's life, rollback, recovery, scheduling, state, exit codes."""
    parts = [
        "# Operations",
        "",
        _NOTICE,
        "",
        "What a run does to a host, how it is undone, what happens after a crash, how runs are",
        "paced and scheduled, where state is kept, and what the exit codes mean. The JSON report",
        "is described in [json-report.md](json-report.md), the cost of a run in",
        "[performance.md](performance.md).",
        "",
        _runbook(),
        "",
        "## A run on one host",
        "",
        markdown(host_run.__doc__),
        "",
        "## Rollback",
        "",
        markdown(rollback.__doc__),
        "",
        markdown(rollback.undo_run.__doc__, 1),
        "",
        _command_help("rollback") + " Without `--yes` it asks first.",
        "",
        markdown(rollback_target.__doc__, 1),
        "",
        "### What a journal says about its run",
        "",
        markdown(runs.__doc__, 1),
        "",
        "## Checks before a running server is stopped",
        "",
        markdown(prechecks.__doc__),
        "",
        "**Drift: refuse, not fall back.** When the files a restart imports changed under the",
        "running server (and not by deploy), the run refuses before the stop (exit 4) rather",
        "than fall back to the last state seen serving. Falling back would mean restoring file",
        "contents the operator (or a `git checkout`, a `pip install`) deliberately replaced,",
        "on a production host, as a side effect of an unrelated change; and deploy only knows",
        "the last state it saw serving when a run of its own recorded it, which a server",
        "started by hand never was. Refusing costs one command (restart the server on the",
        "file as it is, or put the file back) and never stops a server without an undo that",
        "can start.",
        "",
        "## Crash recovery",
        "",
        markdown(journal.__doc__, 2),
        "",
        markdown(lock.__doc__, 1),
        "",
        "A run cut short by `--timeout`, SIGINT or SIGTERM is not left so: it rolls back what it",
        "changed before it exits (see [the deadline](#deadlines)); only a second signal leaves it.",
        "",
        markdown(host_status.__doc__),
        "",
        "## Many hosts, batches and deadlines",
        "",
        "### Parallelism",
        "",
        markdown(fleet.__doc__, 0, 3),
        "",
        "### Deadlines",
        "",
        markdown(fleet.__doc__, 3),
        "",
        "### Worker processes",
        "",
        markdown(shards.__doc__, 1),
        "",
        markdown(workers.__doc__, 1),
        "",
        "### Rolling batches",
        "",
        markdown(batches.__doc__),
        "",
        "## Scheduling",
        "",
        markdown(scheduling.__doc__, 0, 5),
        "",
        "### Secrets of a scheduled job",
        "",
        markdown(jobenv.__doc__),
        "",
        "### One run of a job at a time",
        "",
        markdown(local_lock.__doc__),
        "",
        "## Where state lives",
        "",
        "### On each host",
        "",
        markdown(layout.__doc__, 0, 2),
        "",
        markdown(records.__doc__, 0),
        "",
        f"`state_dir` defaults to `{inventory_models.DEFAULT_STATE_DIR}` and is set per host in",
        "the inventory ([inventory.md](inventory.md#host-keys)).",
        "",
        markdown(lock.__doc__, 0, 1),
        "",
        "### Trusting state_dir",
        "",
        markdown(trust.TRUST_RULE),
        "",
        "### Trusting the interpreters deploy runs as root",
        "",
        markdown(interpreter.TRUST_RULE),
        "",
        "### How files are changed on a host",
        "",
        markdown(hostfiles.FILES_RULE),
        "",
        "### become: what running sudo protects, and what it cannot",
        "",
        markdown(become.SUDO_LIMITS),
        "",
        "### Which process is the server, and where it may start from",
        "",
        markdown(service_identity.IDENTITY_RULE),
        "",
        "### A server systemd runs: deploy's drop-in",
        "",
        markdown(service_dropin.SYSTEMD_RULE),
        "",
        "### The user a restarted server runs as",
        "",
        markdown(service_state.RUN_AS_RULE),
        "",
        "### On the workstation",
        "",
        markdown(history.__doc__),
        "",
        _command_help("history"),
        "",
        f"All of it lives in {markdown(history.state_home.__doc__)}",
        "",
        "A scheduled job (`deploy schedule`) keeps its last report in",
        f"`{_option_help('schedule', '--report').removeprefix('Default: ')}` and its log in",
        f"`{_option_help('schedule', '--log-file').removeprefix('Default: ')}` unless told otherwise.",
        "",
        "## Secrets",
        "",
        markdown(masking.__doc__),
        "",
        "## Exit codes",
        "",
        _exit_codes(),
        "",
        f"With several hosts, the most serious code wins: {_severity_order()}.",
        "A host's outcome and the code it leads to are listed in",
        "[json-report.md](json-report.md#values).",
        "",
        "### Errors and their exit codes",
        "",
        markdown(errors.__doc__, 0, 2),
        "",
        _error_tree(),
        "",
    ]
    return "\n".join(parts)
