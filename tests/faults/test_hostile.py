"""Hostile and awkward input: shell metacharacters everywhere, symlinks, `..`, odd file content.

The canary: every injection attempt is ``touch`` of a file whose name is unique to the test; if
any string reached a shell unquoted, the canary exists afterwards (in the shell's working
directory, $HOME, or the sandbox root). Whatever the outcome, nothing outside the named paths
may change (`tree_digest` of the sandbox root, state_dir excluded).
"""

from __future__ import annotations

import hashlib
import secrets
import sys
from pathlib import Path

import pytest
import yaml

from deploy.edits.patch import apply_patch
from deploy.edits.pyinsert import insert_into_class
from deploy.edits.text import append_text
from tests.faults.conftest import FILES_ONLY, FaultHost, record_check


def tree_digest(root: Path, skip: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if skip in path.parents or path == skip or not path.is_file() or path.is_symlink():
            continue
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def canaries(host: FaultHost, token: str) -> list[Path]:
    places = [Path.home(), Path("/root"), Path("/"), host.ssh.root, Path.cwd()]
    return [p / token for p in places if (p / token).exists()]


def injections(token: str) -> list[str]:
    return [
        f"a b;touch {token}",
        f"$(touch {token})",
        f"`touch {token}`",
        f"'\"; touch {token}; echo '",
        f"x\ntouch {token}\n",
        f"${{IFS}}touch${{IFS}}{token}",
    ]


@pytest.mark.parametrize("where", ["model_file", "state_dir", "sglang_python", "model_class"])
def test_metacharacters_never_reach_a_shell(make_fault_host, where: str) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    token = f"deploy-canary-{secrets.token_hex(4)}"
    before = tree_digest(host.ssh.root, host.state_dir)
    results = []
    for attempt in injections(token):
        inventory = yaml.safe_load(host.inventory.read_text())
        entry = inventory["hosts"]["gpu-1"]
        if where == "model_file":
            hostile = host.model_file.parent / f"d {attempt.replace('/', '_')}" / "kimi_k25.py"
            hostile.parent.mkdir()
            hostile.write_bytes(host.original)
            entry["vars"]["model_file"] = str(hostile)
        elif where == "state_dir":
            entry["state_dir"] = f"{host.ssh.root}/state {attempt.replace('/', '_')}"
        else:
            entry["vars"][where] = attempt
        host.inventory.write_text(yaml.safe_dump(inventory))
        result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
        results.append(result)
        assert "Traceback" not in result.output, result.output
        assert result.exit_code in (0, 1, 2), result.output
        if where == "model_file":
            patched = hostile.read_bytes()
            assert result.exit_code == 0, result.output
            assert patched == host.patched, "the file at the hostile path is the one changed"
            hostile.unlink()
            hostile.parent.rmdir()
        elif where == "state_dir":
            assert result.exit_code == 0, result.output
            assert host.model_file.read_bytes() == host.patched
            host.model_file.write_bytes(host.original)
        else:
            assert result.exit_code != 0, f"{where}={attempt!r} cannot be valid:\n{result.output}"
            assert host.model_file.read_bytes() == host.original
    found = canaries(host, token)
    for path in found:
        path.unlink()
    after = {
        k: v
        for k, v in tree_digest(host.ssh.root, host.state_dir).items()
        if not k.startswith("state ")
    }
    record_check("hostile", f"shell metacharacters in {where}", not found and after == before)
    assert not found, f"an injection ran: {found}"
    assert after == before, "something outside the named path changed"


def test_hostile_host_name_is_refused_or_harmless(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    token = f"deploy-canary-{secrets.token_hex(4)}"
    inventory = yaml.safe_load(host.inventory.read_text())
    for attempt in injections(token):
        inventory["hosts"] = {attempt: inventory["hosts"].pop(next(iter(inventory["hosts"])))}
        inventory["groups"] = {}
        host.inventory.write_text(yaml.safe_dump(inventory))
        result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
        assert "Traceback" not in result.output, result.output
        assert result.exit_code in (0, 2), result.output
        if result.exit_code == 2:
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        else:
            host.model_file.write_bytes(host.original)
    found = canaries(host, token)
    record_check("hostile", "shell metacharacters in host names", not found)
    assert not found


def test_symlinked_target_is_refused(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    """Decision (documented in docs/reliability.md): a symlink is refused, never followed."""
    host: FaultHost = make_fault_host()
    link = host.model_file.with_name("kimi_link.py")
    link.symlink_to(host.model_file)
    inventory = yaml.safe_load(host.inventory.read_text())
    inventory["hosts"]["gpu-1"]["vars"]["model_file"] = str(link)
    host.inventory.write_text(yaml.safe_dump(inventory))
    result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    ok = (
        result.exit_code == 1
        and "is a symlink" in result.output
        and link.is_symlink()
        and host.model_file.read_bytes() == host.original
    )
    record_check("hostile", "symlinked target: refused, link and file untouched", ok)
    assert ok, result.output


def test_dotdot_path_changes_only_the_file_it_names(make_fault_host) -> None:  # type: ignore[no-untyped-def]
    host: FaultHost = make_fault_host()
    before = tree_digest(host.ssh.root, host.state_dir)
    sideways = host.model_file.parent / ".." / "models" / host.model_file.name
    inventory = yaml.safe_load(host.inventory.read_text())
    inventory["hosts"]["gpu-1"]["vars"]["model_file"] = str(sideways)
    host.inventory.write_text(yaml.safe_dump(inventory))
    result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    after = tree_digest(host.ssh.root, host.state_dir)
    changed = {k for k in after if after[k] != before.get(k)}
    ok = result.exit_code == 0 and changed == {str(host.model_file.relative_to(host.ssh.root))}
    record_check("hostile", "`..` in the path: only the file it resolves to changes", ok)
    assert ok, (changed, result.output)


CRLF_SOURCE = b"class A:\r\n    def a(self):\r\n        return 1\r\n\r\n\r\nX = [A]\r\n"
TABS_SOURCE = b"class A:\n\tdef a(self):\n\t\treturn 1\n\nX = [A]"
LATIN1 = b"# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\nVALUE = 1\n"
LATIN1_DIFF = (
    "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n # -*- coding: latin-1 -*-\n NAME = 'café'\n"
    "-VALUE = 1\n+VALUE = 2\n"
)
METHOD = "def b(self):\n    return 2\n"


@pytest.mark.parametrize(
    "megabytes", [pytest.param(8, id="8MB"), pytest.param(100, id="100MB", marks=pytest.mark.slow)]
)
def test_awkward_contents_round_trip(make_fault_host, tmp_path: Path, megabytes: int) -> None:  # type: ignore[no-untyped-def]
    """CRLF, tabs, no trailing newline, binary, not UTF-8, and a huge file: apply, rollback."""
    host: FaultHost = make_fault_host()
    files = {
        "crlf.py": CRLF_SOURCE,
        "tabs.py": TABS_SOURCE,
        "latin1.py": LATIN1,
        "binary.bin": bytes(range(256)) * 64 + b"\x00\xff\xfe",
        "no_newline.txt": b"last line without newline",
        # distinct lines, as in a real log: difflib is quadratic on identical lines (see
        # docs/reliability.md, "known limits")
        "huge.log": b"".join(b"%09d %s\n" % (i, b"x" * 90) for i in range(megabytes * 10_400)),
    }
    base = host.ssh.root / "awkward"
    base.mkdir()
    for name, data in files.items():
        (base / name).write_bytes(data)
    steps = [
        {"python_insert": {"path": f"{base}/crlf.py", "class": "A", "code": METHOD}},
        {"python_insert": {"path": f"{base}/tabs.py", "class": "A", "code": METHOD}},
        {"patch": {"path": f"{base}/latin1.py", "diff": LATIN1_DIFF}},
        {"append": {"path": f"{base}/binary.bin", "text": "TRAILER\n"}},
        {"append": {"path": f"{base}/no_newline.txt", "text": "appended\n"}},
        {"append": {"path": f"{base}/huge.log", "text": "END\n"}},
        {"verify_tail": {"path": f"{base}/huge.log", "last_line": "END"}},
        {
            "verify_python": {
                "path": f"{base}/crlf.py",
                "python": sys.executable,
                "compiles": True,
                "class_has": {"A": ["a", "b"]},
            }
        },
    ]
    playbook = tmp_path / "awkward.yaml"
    playbook.write_text(yaml.safe_dump({"name": "awkward", "hosts": "all", "steps": steps}))
    expected = {
        "crlf.py": insert_into_class(CRLF_SOURCE, "A", METHOD).content,
        "tabs.py": insert_into_class(TABS_SOURCE, "A", METHOD).content,
        "latin1.py": apply_patch(LATIN1, LATIN1_DIFF).content,
        "binary.bin": append_text(files["binary.bin"], "TRAILER\n").content,
        "no_newline.txt": append_text(files["no_newline.txt"], "appended\n").content,
        "huge.log": files["huge.log"] + b"END\n",
    }
    applied = host.deploy("apply", str(playbook), "--yes", timeout=300)
    assert applied.exit_code == 0, applied.output
    wrong = [n for n, data in expected.items() if (base / n).read_bytes() != data]
    assert b"\r\n    def b(self):\r\n" in (base / "crlf.py").read_bytes()
    assert b"\n\tdef b(self):\n\t\treturn 2\n" in (base / "tabs.py").read_bytes()
    rolled = host.deploy("rollback", "--yes", timeout=300)
    assert rolled.exit_code == 0, rolled.output
    not_back = [n for n, data in files.items() if (base / n).read_bytes() != data]
    ok = not wrong and not not_back
    record_check(
        "hostile",
        f"CRLF, tabs, no trailing newline, binary, latin-1, {megabytes} MB: exact apply and "
        "byte-exact rollback",
        ok,
    )
    assert not wrong, wrong
    assert not not_back, not_back
