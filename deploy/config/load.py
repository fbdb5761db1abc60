"""The config layer's door: files and command-line input in, validated per-host plans out.

    load_inventory(path) ─┐
    load_playbook(path)  ─┼─> resolve(...) -> [HostPlan, ...]     (deploy apply, --check)
    parse_extra_vars(-e) ─┘   validate_all(...) -> ["file:line:col field: message", ...]

Every file is validated twice. Loading (this module) checks the file *as written*: YAML
syntax, duplicate keys, unknown keys, types, host patterns and group members — before any
variable is known, so a typo is reported even for hosts the run would not touch. `resolve`
(`deploy.config.resolve`, re-exported here) then renders every string per host and validates
the result again, so that ``port: "{{ ssh_port }}"`` is checked as the port it becomes.
Nothing here touches the network; every failure is an `InputError` of one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from deploy import trace
from deploy.config.errors import Problems, validation_error
from deploy.config.inventory import AS_WRITTEN
from deploy.config.inventory_file import INVENTORY_ENV as INVENTORY_ENV
from deploy.config.inventory_file import PLAYBOOK_SUFFIXES as PLAYBOOK_SUFFIXES
from deploy.config.inventory_file import LoadedInventory as LoadedInventory
from deploy.config.inventory_file import available_playbooks as available_playbooks
from deploy.config.inventory_file import build_parts_first
from deploy.config.inventory_file import find_playbook as find_playbook
from deploy.config.inventory_file import load_inventory as load_inventory
from deploy.config.playbook import Playbook
from deploy.config.resolve import (
    HostPlan,
    merge_vars,
    resolve,
    resolve_collecting,
    resolve_hosts,
)
from deploy.config.services import ServiceSpec
from deploy.config.steps import action_of, args_of
from deploy.config.template import (
    BUILTIN_VARS,
    ExtraVars,
    check_var_names,
    is_template,
    parse_extra_vars,
)
from deploy.config.yamlpos import Positions, load_yaml
from deploy.errors import InputError


@dataclass(frozen=True)
class LoadedPlaybook:
    """A playbook file, validated as written (templates not yet rendered)."""

    path: Path
    playbook: Playbook
    data: dict[str, Any]
    positions: Positions


@trace.spanned("config.load_playbook")
def load_playbook(path: Path) -> LoadedPlaybook:
    """Load and check one playbook file.

    Raises:
        InputError: missing or invalid file, templated tags, or bad variable names.
    """
    if not path.is_file():
        raise InputError(f"playbook not found: {path}")
    doc = load_yaml(path)
    build_parts_first(ServiceSpec)
    try:
        playbook = Playbook.model_validate(doc.data, context={AS_WRITTEN: True})
    except ValidationError as exc:
        raise validation_error(exc, root=Playbook, data=doc.data, positions=doc.positions) from None
    check_var_names(playbook.vars, doc.positions, ("vars",))
    for index, step in enumerate(playbook.steps):
        for number, tag in enumerate(step.tags):
            if is_template(tag):
                raise InputError(
                    "tags are not templated (they select steps before variables are known)",
                    doc.positions.locate(("steps", index, "tags", number)),
                )
    for index, step in enumerate(playbook.steps):
        service = getattr(args_of(step), "service", None)
        if (
            isinstance(service, str)
            and not is_template(service)
            and service not in playbook.services
        ):
            defined = ", ".join(playbook.services) or "none defined under 'services:'"
            raise InputError(
                f"unknown service {service!r} (services: {defined})",
                doc.positions.locate(("steps", index, action_of(step), "service")),
            )
    return LoadedPlaybook(path, playbook, doc.data, doc.positions)


def validate_all(inventory_path: Path, playbooks_dir: Path) -> list[str]:
    """Every problem in the inventory and in every playbook, one line each (none: all good).

    Each playbook is resolved against its hosts with no extra vars, so a playbook that needs
    ``-e NAME=...`` is reported as using an undefined variable. The same problem on several
    hosts is one line listing them.
    """
    lines: list[str] = []
    inv: LoadedInventory | None = None
    try:
        inv = load_inventory(inventory_path)
    except InputError as exc:
        lines.extend(Problems.expand(exc))
    playbooks = available_playbooks(playbooks_dir)
    if not playbooks:
        lines.append(f"{playbooks_dir}: no playbooks found (*.yaml)")
    for path in playbooks:
        try:
            pb = load_playbook(path)
            if inv is None:
                continue
            problems = Problems(collect=True)
            resolve_collecting(
                inv, pb, problems, extra_vars={}, limit=None, tags=None, skip_tags=None
            )
            lines.extend(problems.lines())
        except InputError as exc:
            lines.extend(Problems.expand(exc))
    return lines


__all__ = [  # the door; parse_extra_vars and ExtraVars live with the variables they make
    "BUILTIN_VARS",
    "INVENTORY_ENV",
    "ExtraVars",
    "HostPlan",
    "LoadedInventory",
    "LoadedPlaybook",
    "find_playbook",
    "load_inventory",
    "load_playbook",
    "merge_vars",
    "parse_extra_vars",
    "resolve",
    "resolve_hosts",
    "validate_all",
]
