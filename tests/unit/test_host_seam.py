"""The host seam holds: only `deploy.remote` knows paramiko, Fabric or a concrete host class.

Engine and steps depend on the `Host` protocol (`deploy.remote.api`); which implementation
runs is chosen in one place (`RunOptions.open_host`, default `run_options.ssh_host`). A module above the
remote layer that imports paramiko or Fabric, or names `RemoteHost`, breaks the fast tests'
premise that `LocalHost` exercises the same code.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "deploy"
#: The remote layer itself, and development tooling that drives real sshd on purpose.
EXEMPT = {"remote", "sandbox"}
#: (module, function) allowed to name `RemoteHost`: the one that constructs it.
CONSTRUCTORS = {("engine/run_options.py", "ssh_host")}


def offenders(package: Path) -> list[str]:
    """``module:line what`` for every SSH-library import or `RemoteHost` use outside ``EXEMPT``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] in EXEMPT:
            continue
        tree = ast.parse(path.read_text(), str(path))
        allowed: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and (str(relative), node.name) in CONSTRUCTORS:
                allowed |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):
                    modules.append(node.module or "")
                for module in modules:
                    if module.split(".")[0] in {"paramiko", "fabric", "invoke"}:
                        found.append(f"{relative}:{node.lineno} imports {module}")
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Name):
                names = [node.id]
            else:
                continue
            if "RemoteHost" in names and node.lineno not in allowed:
                found.append(f"{relative}:{node.lineno} names RemoteHost")
    return sorted(set(found))


def test_no_paramiko_fabric_or_remotehost_above_the_remote_layer() -> None:
    assert offenders(PACKAGE) == []


def test_the_check_finds_an_offender(tmp_path: Path) -> None:
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "bad.py").write_text(
        "import paramiko\n"
        "from deploy.remote.host import RemoteHost\n"
        "def f(h: RemoteHost) -> None: ...\n"
    )
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "fine.py").write_text("import paramiko\n")
    assert offenders(tmp_path) == [
        "steps/bad.py:1 imports paramiko",
        "steps/bad.py:2 names RemoteHost",
        "steps/bad.py:3 names RemoteHost",
    ]
