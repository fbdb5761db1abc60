"""The service modules import each other in one direction only (issue 31, point 1).

Read from the source with `ast` (every import, a function's lazy one and a TYPE_CHECKING one
included): among `deploy.services` and the service steps there is no import circle, the
services never import a step or the engine, and a step reaches a service only through
`deploy.services` and `deploy.steps.service_client`, never through another service step (the
restart's own parts aside: its preflight, `deploy.steps.service_preflight`, and its undo
handler, `deploy.steps.service_undo`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import deploy

ROOT = Path(deploy.__file__).parent
SERVICE_STEPS = (
    "service",
    "service_preflight",
    "service_client",
    "service_undo",
    "wait_healthy",
    "smoke",
    "gate_throughput",
)


def _modules() -> dict[str, Path]:
    found = {f"deploy.services.{p.stem}": p for p in (ROOT / "services").glob("*.py")}
    found["deploy.services"] = found.pop("deploy.services.__init__")
    for stem in SERVICE_STEPS:
        found[f"deploy.steps.{stem}"] = ROOT / "steps" / f"{stem}.py"
    return found


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every deploy module ``path`` imports (``from a import b`` names ``a.b`` if a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in known else node.module)
    return {name for name in names if name.startswith("deploy")}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) & known for name, path in modules.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``edges`` (as the path that closes it), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_among_the_service_modules() -> None:
    edges = graph()
    assert "deploy.services.control" in edges and "deploy.steps.gate_throughput" in edges
    assert cycle(edges) is None, f"import circle: {' -> '.join(cycle(edges) or [])}"


def test_services_import_no_step_and_no_engine() -> None:
    modules = _modules()
    for name, path in modules.items():
        if not name.startswith("deploy.services"):
            continue
        above = {
            m
            for m in _imports(path, set(modules))
            if m.startswith(("deploy.steps", "deploy.engine"))
        }
        assert not above, f"{name} imports {sorted(above)}"


def test_a_service_step_reaches_services_through_the_client_only() -> None:
    edges = graph()
    for stem in SERVICE_STEPS:
        name = f"deploy.steps.{stem}"
        others = {m for m in edges[name] if m.startswith("deploy.steps.")}
        allowed = {
            "deploy.steps.service_client",
            "deploy.steps.service_preflight",
            "deploy.steps.service_undo",
        }
        assert others <= allowed, f"{name} imports {sorted(others)}"
