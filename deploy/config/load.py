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

from pydantic import BaseModel, ValidationError

from deploy import trace
from deploy.config.errors import Problems, suggest, validation_error
from deploy.config.inventory import AS_WRITTEN, GroupSpec, HostSpec, Inventory
from deploy.config.playbook import Playbook
from deploy.config.resolve import (
    HostPlan,
    merge_vars,
    resolve,
    resolve_collecting,
    resolve_hosts,
)
from deploy.config.select import check_inventory
from deploy.config.services import ServiceSpec
from deploy.config.steps import action_of, args_of
from deploy.config.template import (
    BUILTIN_VARS,
    ExtraVars,
    check_var_names,
    is_template,
    parse_extra_vars,
)
from deploy.config.yamlpos import KeyPath, Positions, load_yaml
from deploy.errors import InputError

INVENTORY_ENV = "DEPLOY_INVENTORY"
PLAYBOOK_SUFFIXES = (".yaml", ".yml")


def _build_parts_first(*parts: type[BaseModel]) -> None:
    """Build the models a file model contains before the file model itself.

    Every model is built (pydantic's schema generation, the start-up's largest CPU cost) on
    first use. A file model built first generates its parts' schemas inline, and a part that
    is also validated on its own (`HostSpec` per host once rendered, `GroupSpec` for a group
    written as a list, `ServiceSpec` per used service) is then generated a second time. Built
    first, the part's schema is reused by the file model: ~10 ms of every command that loads
    the files. A model already built returns at once.
    """
    for part in parts:
        part.model_rebuild()


@dataclass(frozen=True)
class LoadedInventory:
    """An inventory file, validated as written; ``data`` is the raw YAML it came from.

    Host fields written as templates (``port: "{{ ssh_port }}"``) hold their template text in
    ``inventory``; use `HostPlan.spec` for the resolved, fully validated settings.
    """

    path: Path
    inventory: Inventory
    data: dict[str, Any]
    positions: Positions


@dataclass(frozen=True)
class LoadedPlaybook:
    """A playbook file, validated as written (templates not yet rendered)."""

    path: Path
    playbook: Playbook
    data: dict[str, Any]
    positions: Positions


@trace.spanned("config.load_inventory")
def load_inventory(path: Path) -> LoadedInventory:
    """Load and check ``hosts.yaml``.

    Raises:
        InputError: the file is missing or invalid (YAML, keys, types, groups, variable names).
    """
    if not path.is_file():
        raise InputError(f"inventory not found: {path} (use -i FILE or set {INVENTORY_ENV})")
    doc = load_yaml(path)
    _build_parts_first(HostSpec, GroupSpec)
    try:
        inventory = Inventory.model_validate(doc.data, context={AS_WRITTEN: True})
    except ValidationError as exc:
        raise validation_error(
            exc, root=Inventory, data=doc.data, positions=doc.positions
        ) from None
    check_inventory(inventory, doc.positions)
    check_var_names(inventory.vars, doc.positions, ("vars",))
    for name in inventory.groups:
        base: KeyPath = ("groups", name, "vars")
        check_var_names(inventory.group(name).vars, doc.positions, base)
    for name in inventory.hosts:
        check_var_names(inventory.host(name).vars, doc.positions, ("hosts", name, "vars"))
    return LoadedInventory(path, inventory, doc.data, doc.positions)


def available_playbooks(playbooks_dir: Path) -> list[Path]:
    """The playbook files in ``playbooks_dir``, sorted by name (none if it does not exist)."""
    if not playbooks_dir.is_dir():
        return []
    return sorted(p for p in playbooks_dir.iterdir() if p.suffix in PLAYBOOK_SUFFIXES)


def find_playbook(name_or_path: str, playbooks_dir: Path) -> Path:
    """The playbook file a command line names: a name in ``playbooks_dir``, or a path.

    ``kimi-eagle3``, ``kimi-eagle3.yaml`` and ``playbooks/kimi-eagle3.yaml`` all work; an
    argument with a ``/`` is only ever a path.

    Raises:
        InputError: not found, listing the playbooks that exist.
    """
    given = Path(name_or_path)
    if ("/" in name_or_path or given.suffix in PLAYBOOK_SUFFIXES) and given.is_file():
        return given
    if "/" not in name_or_path and name_or_path:
        for suffix in ("", *PLAYBOOK_SUFFIXES):
            candidate = playbooks_dir / f"{name_or_path}{suffix}"
            if candidate.is_file() and candidate.suffix in PLAYBOOK_SUFFIXES:
                return candidate
    names = [p.stem for p in available_playbooks(playbooks_dir)]
    listing = f"available: {', '.join(names)}" if names else f"no playbooks in {playbooks_dir}"
    hint = suggest(given.stem, names)
    raise InputError(f"playbook not found: {name_or_path} ({listing}){hint}")


@trace.spanned("config.load_playbook")
def load_playbook(path: Path) -> LoadedPlaybook:
    """Load and check one playbook file.

    Raises:
        InputError: missing or invalid file, templated tags, or bad variable names.
    """
    if not path.is_file():
        raise InputError(f"playbook not found: {path}")
    doc = load_yaml(path)
    _build_parts_first(ServiceSpec)
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
