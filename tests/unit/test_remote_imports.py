"""The transport (deploy/remote and the host programs in deploy/hostpy) has no import cycle:
every import counts, at module level, in a function, or under ``TYPE_CHECKING`` (a circle
there still means two modules that cannot be understood, or moved, one without the other)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "deploy.remote"
ROOT = Path(__file__).resolve().parents[2] / "deploy" / "remote"
#: The transport's packages, judged as one graph (an edge may cross between them).
TRANSPORT = {"deploy.remote": ROOT, "deploy.hostpy": ROOT.parent / "hostpy"}


def imports(path: Path, package: str = PACKAGE) -> set[str]:
    """The modules of ``package`` that ``path`` imports, anywhere in its text."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from deploy.remote import x`` may name a module x.
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(n for n in names if n.startswith(package + "."))
    return found


def graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    return graph_of({package: root})


def graph_of(packages: dict[str, Path]) -> dict[str, set[str]]:
    modules = {
        f"{package}.{p.stem}": p
        for package, root in packages.items()
        for p in root.glob("*.py")
        if p.stem != "__init__"
    }
    return {name: imports(path, "deploy") & set(modules) - {name} for name, path in modules.items()}


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import circle in ``edges`` (module -> modules it imports), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_the_transport_has_no_import_cycle() -> None:
    edges = graph_of(TRANSPORT)
    assert any(name.startswith("deploy.hostpy.") for name in edges), "deploy/hostpy not read"
    found = cycle(edges)
    assert not found, "import circle in deploy/remote and deploy/hostpy: " + " -> ".join(found)


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"a": "import deploy.remote.b\n", "b": "x = 1\n"}, False),
        ({"a": "from deploy.remote.b import x\n", "b": "from deploy.remote.a import y\n"}, True),
        # A function-level import and a TYPE_CHECKING one count as much as a top-level one.
        (
            {
                "a": "def f():\n    from deploy.remote.b import x\n",
                "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from deploy.remote import a\n",
            },
            True,
        ),
    ],
)
def test_the_cycle_check_sees_every_kind_of_import(
    tmp_path: Path, sources: dict[str, str], expected: bool
) -> None:
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text)
    assert bool(cycle(graph(tmp_path))) is expected
