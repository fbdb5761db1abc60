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
)
from deploy.engine import status as host_status
from deploy.remote import become, hostfiles, lock
from deploy.services import identity as service_identity
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
