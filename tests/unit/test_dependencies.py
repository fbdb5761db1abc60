"""Every runtime dependency is bounded below its next major release (pyproject.toml).

deploy overrides a private method of paramiko (`deploy.remote.connect.Wire`) and builds on
Fabric's, pydantic's and click's APIs: a fresh install must not pick up a major release that
reshaped them before the suite has run on it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
_ENTRY = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9][0-9.]*),<([0-9]+)$")


def _dependencies() -> dict[str, tuple[str, int]]:
    entries = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    found = {}
    for entry in entries:
        match = _ENTRY.match(entry.replace(" ", ""))
        assert match, f"{entry!r}: give a lower bound and '<' the next major release"
        name, low, high = match.groups()
        assert int(high) > int(low.split(".")[0]), f"{entry!r}: the bound excludes every version"
        found[name.lower()] = (low, int(high))
    return found


def test_every_dependency_is_bounded_below_a_major_release() -> None:
    found = _dependencies()
    assert {"fabric", "paramiko", "pydantic", "pyyaml", "click", "jinja2"} <= set(found)
