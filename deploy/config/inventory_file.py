"""The inventory file and the playbook's path: what a command needs before the step catalogue.

Neither needs the playbook's models, the step modules or the templating of steps, which
`deploy.config.load` imports (~60 ms of CPU): so they live here, importing only the
inventory's models, and `deploy.config.load` re-exports them for every other caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from deploy import trace
from deploy.config.errors import suggest, validation_error
from deploy.config.inventory import AS_WRITTEN, GroupSpec, HostSpec, Inventory
from deploy.config.select import check_inventory
from deploy.config.template import check_var_names
from deploy.config.yamlpos import KeyPath, Positions, load_yaml
from deploy.errors import InputError

INVENTORY_ENV = "DEPLOY_INVENTORY"
PLAYBOOK_SUFFIXES = (".yaml", ".yml")


def build_parts_first(*parts: type[BaseModel]) -> None:
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


@trace.spanned("config.load_inventory")
def load_inventory(path: Path) -> LoadedInventory:
    """Load and check ``hosts.yaml``.

    Raises:
        InputError: the file is missing or invalid (YAML, keys, types, groups, variable names).
    """
    if not path.is_file():
        raise InputError(f"inventory not found: {path} (use -i FILE or set {INVENTORY_ENV})")
    doc = load_yaml(path)
    build_parts_first(HostSpec, GroupSpec)
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
