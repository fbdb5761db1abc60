"""``python -m tools.docgen``: regenerate ``docs/`` and ``schema/`` from the code.

Reference pages written by hand drift: a key is added to a model, a default changes, an exit
code gains a meaning, and the page keeps saying the old thing. Here every fact that code
already states is taken from it — keys, types, defaults and descriptions from the pydantic
models, rules from their validators, explanations from the docstrings of the modules that
implement them — and only the examples are written here, each one loaded by the real loader
in the tests. ``tests/unit/test_docs.py`` compares the files in the repository with what this
module produces and fails with "run python -m tools.docgen" when they differ.

Generated: ``docs/playbooks.md``, ``docs/inventory.md``, ``docs/operations.md`` and the JSON
Schemas in ``schema/`` (`deploy.schema`). ``docs/json-report.md`` and ``docs/performance.md``
have their own generators and are only linked to. ``--check`` writes nothing and exits 1 when
a file is out of date, for CI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from deploy import schema
from tools.docgen_examples import (
    EXAMPLE_FRAME,
    INVENTORY_EXAMPLE,
    SERVICES_EXAMPLE,
    STEP_EXAMPLES,
    example_playbook,
)
from tools.docgen_markdown import field_table, markdown, model_rules
from tools.docgen_operations import render_operations
from tools.docgen_reference import render_inventory, render_playbooks, step_classes

__all__ = [
    "DOCS",
    "EXAMPLE_FRAME",
    "INVENTORY_EXAMPLE",
    "RENDERERS",
    "SCHEMA_DIR",
    "SERVICES_EXAMPLE",
    "STEP_EXAMPLES",
    "example_playbook",
    "field_table",
    "generated",
    "main",
    "markdown",
    "model_rules",
    "render_inventory",
    "render_operations",
    "render_playbooks",
    "source_root",
    "stale",
    "step_classes",
    "write",
]

DOCS = ("docs/playbooks.md", "docs/inventory.md", "docs/operations.md")
SCHEMA_DIR = "schema"

# --- writing ----------------------------------------------------------------------------------

RENDERERS: dict[str, Callable[[], str]] = {
    "docs/playbooks.md": render_playbooks,
    "docs/inventory.md": render_inventory,
    "docs/operations.md": render_operations,
}


def generated() -> dict[str, str]:
    """Path relative to the repository -> the text it must hold."""
    files = {path: render() for path, render in RENDERERS.items()}
    files.update({f"{SCHEMA_DIR}/{name}": text for name, text in schema.schema_files().items()})
    return files


def stale(root: Path) -> list[str]:
    """The generated files under ``root`` that are missing or differ from what is generated."""
    out = []
    for relative, text in generated().items():
        path = root / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(relative)
    return out


def write(root: Path) -> list[Path]:
    """Write every generated file under ``root``; return the paths written."""
    written = []
    for relative, text in generated().items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def source_root() -> Path | None:
    """The repository this package was imported from, when it is a source checkout."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docgen", description=__doc__)
    parser.add_argument("--root", type=Path, help="Repository root (default: this checkout).")
    parser.add_argument("--check", action="store_true", help="Write nothing; exit 1 if stale.")
    args = parser.parse_args(argv)
    root = args.root or source_root()
    if root is None:
        parser.error("not running from a source checkout: pass --root DIR")
    if args.check:
        out_of_date = stale(root)
        for relative in out_of_date:
            print(f"out of date: {relative} (run python -m tools.docgen)", file=sys.stderr)
        return 1 if out_of_date else 0
    for path in write(root):
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
