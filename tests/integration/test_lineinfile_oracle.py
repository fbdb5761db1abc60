"""Ansible's own lineinfile as the oracle for ours (STYLE: a peer's semantics are a test oracle).

Every case of the unit table (tests/unit/test_lineinfile.py) is run through ansible-core's
``lineinfile`` module (one ``ansible-playbook`` on localhost, the bench's pinned ansible-core in
``~/.cache/deploy/bench-venv``; skipped when it is not built: ``python -m bench`` builds it)
and through ``deploy.edits.lineinfile``. The bytes must be equal, except in the cases where we
differ on purpose (listed in `ON_PURPOSE`, documented in the step's docs), where they must
differ: if Ansible ever agrees there, the documentation is wrong.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.toolchain import default_root
from deploy.edits.lineinfile import LineSpec, line_in_file
from tests.unit.test_lineinfile import CASES

#: Case ids where deploy's bytes differ from Ansible's, and why (see deploy.steps.lineinfile).
ON_PURPOSE = {
    # Ansible writes os.linesep ("\n") into a CRLF file.
    "CRLF file: an added line gets CRLF",
    # Ansible matches the line with its "\r\n": "=80$" does not match before "\r".
    "CRLF file: the replaced line keeps CRLF; $ matches before CR",
    # Ansible rewrites an already right last line to add its missing newline.
    "last line without a newline, already right: no change (Ansible adds one)",
    # Ansible glues the line onto a last line that lacks its newline: "anchorz".
    "insertafter the last line, which lacks a newline",
}


#: Taken at import, while HOME is still the developer's (the tests' own HOME is empty).
BENCH_VENV = default_root()


def ansible_playbook() -> Path:
    path = BENCH_VENV / "bin" / "ansible-playbook"
    if not path.exists():
        pytest.skip("ansible-core is not built (python -m bench builds ~/.cache/deploy/bench-venv)")
    return path


def task(path: Path, spec: LineSpec) -> dict[str, Any]:
    args: dict[str, Any] = {"path": str(path), "state": spec.state}
    for key in ("line", "regexp", "insertafter", "insertbefore"):
        if getattr(spec, key) is not None:
            args[key] = getattr(spec, key)
    if spec.backrefs:
        args["backrefs"] = True
    return {"name": path.name, "ansible.builtin.lineinfile": args}


def test_ansible_and_deploy_agree_except_on_purpose(tmp_path: Path) -> None:
    runner = ansible_playbook()
    files = tmp_path / "files"
    files.mkdir()
    cases = []
    for number, (name, source, spec, expected) in enumerate(CASES):
        path = files / f"case{number:02d}"
        path.write_bytes(source)
        cases.append((name, path, source, spec, expected))
    playbook = tmp_path / "oracle.yaml"
    playbook.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "gather_facts": False,
              "tasks": [task(path, spec) for _, path, _, spec, _ in cases]}]
        )
    )  # fmt: skip
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_PYTHON_INTERPRETER": str(runner.parent / "python"),
    }
    done = subprocess.run(
        [str(runner), "-i", "localhost,", "-c", "local", str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    disagreements = []
    for name, path, source, spec, _ in cases:
        ours = line_in_file(source, spec).content
        theirs = path.read_bytes()
        if (ours == theirs) == (name in ON_PURPOSE):
            disagreements.append(f"{name}: ours {ours!r}, Ansible's {theirs!r}")
    assert disagreements == []
