"""Where the inventory and the playbooks are, for the commands and the Python API alike.

Light on purpose (paths only): every command's start-up imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The playbooks shipped inside the package (the repository's ``playbooks/`` links here), so
#: an installed ``deploy`` (a wheel, ``pip install .``) runs ``kimi-eagle3`` from any directory.
PACKAGED_PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"


def inventory_path(value: str | os.PathLike[str] | None) -> Path:
    """The inventory: ``value``, else ``$DEPLOY_INVENTORY``, else ``./hosts.yaml``."""
    return Path(value or os.environ.get("DEPLOY_INVENTORY") or "hosts.yaml")


def playbook_dirs(inventory: Path) -> list[Path]:
    """Where playbook names are looked up, first match wins: ``./playbooks``, the one beside
    the inventory, then the packaged ones."""
    dirs = [Path("playbooks"), inventory.parent / "playbooks", PACKAGED_PLAYBOOKS]
    return [d for d in dirs if d.is_dir()] or [Path("playbooks")]


def find_playbook(name: str | os.PathLike[str], inventory: Path) -> Path:
    """The playbook ``name`` names (see `playbook_dirs`); a path is taken as it is.

    Raises:
        InputError: in none of them; the message lists the first directory's playbooks.
    """
    from deploy.config.inventory_file import find_playbook as find_in
    from deploy.errors import InputError

    first: InputError | None = None
    for directory in playbook_dirs(inventory):
        try:
            return find_in(str(name), directory)
        except InputError as exc:
            first = first or exc
    assert first is not None
    raise first
