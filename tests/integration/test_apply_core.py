"""`deploy apply` / `deploy rollback` on SGLang's real kimi_k25.py over real sshd (issue 2)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from deploy.sandbox.sshd import SshdSandbox
from tests.integration.conftest import Deploy, KimiHost, sha256

#: These hosts have no SGLang server: the file part of the playbook only (issue 3 tests the rest).
FILES_ONLY = ("--skip-tags", "service")
EAGLE3 = ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
CLASS = "KimiK25ForConditionalGeneration"


def class_members(path: Path) -> tuple[set[str], set[str]]:
    """(names defined in the class body, names defined at module level)."""
    tree = ast.parse(path.read_bytes())
    module = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS)
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}, module


def test_patches_059_inside_the_class_and_rerun_is_a_noop(
    kimi_059: tuple[KimiHost, Deploy],
) -> None:
    kimi, deploy = kimi_059
    original = kimi.model_file.read_bytes()
    mode_before = 0o640
    os.chmod(kimi.model_file, mode_before)

    first = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert first.exit_code == 0, first.output
    members, module = class_members(kimi.model_file)
    assert set(EAGLE3) <= members
    assert not set(EAGLE3) & module
    assert kimi.model_file.read_text().rstrip().endswith(f"EntryClass = [{CLASS}]")
    assert kimi.model_file.stat().st_mode & 0o777 == mode_before, (
        "mode kept across the atomic write"
    )
    assert not [p for p in kimi.model_file.parent.iterdir() if p.name.endswith(".tmp")], (
        "no temp file left"
    )
    assert "changed" in first.stdout
    assert "compile result reused" not in first.output
    # The compile that passed is recorded on the host: the interpreter identity it passed with.
    record = kimi.host.state_dir / "compiled" / sha256(kimi.model_file)
    assert record.read_text().strip()
    # Everything before the class's end is byte-identical: the insert only adds lines.
    patched = kimi.model_file.read_bytes()
    assert patched.startswith(original[: original.index(b"\n\nEntryClass")])
    runs = kimi.runs()
    assert len(runs) == 1
    run_dir = kimi.runs_dir / runs[0]
    (saved,) = (run_dir / "files").iterdir()
    assert saved.read_bytes() == original
    assert saved.name == hashlib.sha256(original).hexdigest(), "content-addressed copy"
    assert not list(kimi.model_file.parent.glob("*.bak*")), "never a backup beside the file"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    entry = manifest["files"][0]
    assert entry["path"] == str(kimi.model_file)
    assert entry["sha256_after"] == sha256(kimi.model_file)
    assert entry["mode"] == mode_before
    events = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["begin", "backup", "intent", "done", "end"]

    second = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert second.exit_code == 0, second.output
    assert "unchanged" in second.stdout
    assert kimi.model_file.read_bytes() == patched
    assert kimi.runs() == runs, "a re-run that changes nothing makes no new backup"
    # Same bytes, same interpreter binary: the host's interpreter is not started again.
    assert "compile result reused: same bytes, same interpreter binary" in second.output


def test_0510_already_has_the_methods(make_kimi_hosts) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.10"])
    before = sha256(hosts[0].model_file)
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert result.exit_code == 0, result.output
    assert "unchanged" in result.stdout
    assert sha256(hosts[0].model_file) == before
    assert hosts[0].runs() == []


def test_missing_file_fails_cleanly(make_kimi_hosts) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts([None])
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert result.exit_code == 1, result.output
    # Said once, live (stderr), as it happened; the summary's table says "failed".
    assert result.output.count("does not exist; nothing was changed") == 1, result.output
    assert "gpu-1  failed" in result.stdout
    assert not hosts[0].model_file.exists()
    assert hosts[0].runs() == []


def test_naive_append_is_caught_and_rolled_back(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    before = sha256(kimi.model_file)
    result = deploy("apply", "kimi-eagle3-naive-append", "--yes")
    assert result.exit_code == 1, result.output
    assert "rolled back" in result.stdout
    assert "defined at module level" in result.stderr  # the live line; not repeated below
    assert "defined at module level" not in result.stdout
    assert f"restored {kimi.model_file}" in result.stdout
    assert sha256(kimi.model_file) == before, "byte-identical after the automatic rollback"
    (run,) = kimi.runs()
    events = [
        json.loads(line)
        for line in (kimi.runs_dir / run / "journal.jsonl").read_text().splitlines()
    ]
    assert events[-1] == {**events[-1], "event": "end", "outcome": "rolled_back"}
    # Nothing left to roll back: the run is already undone.
    again = deploy("rollback", "--yes")
    assert again.exit_code == 0 and "nothing to do" in again.stdout, again.output


def test_check_shows_the_diff_and_touches_nothing(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    before = sha256(kimi.model_file)
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--check")
    assert result.exit_code == 0, result.output
    assert "+    def set_eagle3_layers_to_capture(" in result.stdout
    assert "would change" in result.stdout
    assert sha256(kimi.model_file) == before
    assert not kimi.host.state_dir.exists(), "--check creates no state on the host"
    naive = deploy("apply", "kimi-eagle3-naive-append", "--check")
    assert naive.exit_code == 1 and "defined at module level" in naive.stdout, naive.output
    assert sha256(kimi.model_file) == before


def test_rollback_restores_and_refuses_foreign_changes(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    original = kimi.model_file.read_bytes()
    assert deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    patched = kimi.model_file.read_bytes()

    rolled = deploy("rollback", "--yes")
    assert rolled.exit_code == 0, rolled.output
    assert kimi.model_file.read_bytes() == original

    assert deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes").exit_code == 0
    assert kimi.model_file.read_bytes() == patched
    kimi.model_file.write_bytes(patched + b"# hand edit by an operator\n")
    refused = deploy("rollback", "--yes")
    assert refused.exit_code == 3, refused.output
    assert "changed since deploy wrote it" in refused.stdout
    assert kimi.model_file.read_bytes().endswith(b"# hand edit by an operator\n"), (
        "refused means untouched"
    )
    forced = deploy("rollback", "--yes", "--force")
    assert forced.exit_code == 0, forced.output
    assert kimi.model_file.read_bytes() == original


def test_rollback_of_a_named_run(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    original = kimi.model_file.read_bytes()
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    run_id = report["run_id"]
    assert report["hosts"][0]["outcome"] == "changed" and report["exit_code"] == 0
    assert report["hosts"][0]["steps"][1]["diff"].count("+    def ") == 3
    assert deploy("rollback", "nonexistent-run", "--yes").exit_code == 2  # test_odd_commands
    assert deploy("rollback", run_id, "--yes").exit_code == 0
    assert kimi.model_file.read_bytes() == original
    history = deploy("history")
    assert run_id in history.stdout and "rollback" in history.stdout


def test_unknown_and_changed_host_keys_are_refused(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    known = kimi.host.known_hosts
    saved = known.read_text()
    known.write_text("")
    before = sha256(kimi.model_file)
    unknown = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert unknown.exit_code == 4, unknown.output
    assert "not in" in unknown.output and "SHA256:" in unknown.output
    assert sha256(kimi.model_file) == before and not kimi.host.state_dir.exists()

    accepted = deploy(
        "apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--check", "--accept-new-host-keys"
    )
    assert accepted.exit_code == 0, accepted.output
    assert f"[127.0.0.1]:{kimi.host.port}" in known.read_text()

    known.write_text(saved)
    kimi.host.restart(new_host_key=True)
    changed = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--accept-new-host-keys")
    assert changed.exit_code == 4, changed.output
    assert "CHANGED" in changed.output and "ssh-keygen -R" in changed.output
    assert sha256(kimi.model_file) == before


def test_hashed_known_hosts_entries_are_honoured(kimi_059: tuple[KimiHost, Deploy]) -> None:
    """``HashKnownHosts yes`` files (``ssh-keygen -H``) name no host in clear; the key is found."""
    kimi, deploy = kimi_059
    known = kimi.host.known_hosts
    saved = known.read_text()
    try:
        subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
        Path(f"{known}.old").unlink(missing_ok=True)
        assert "|1|" in known.read_text() and "127.0.0.1" not in known.read_text()
        result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--check")
        assert result.exit_code == 0, result.output
        assert known.read_text().count("\n") == saved.count("\n"), "nothing appended"
    finally:
        known.write_text(saved)


def test_two_concurrent_applies_one_is_refused(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path
) -> None:
    kimi, deploy = kimi_059
    go = tmp_path / "go"
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "name: slow\nhosts: all\nsteps:\n"
        f"  - verify_command: {{run: 'while [ ! -e {go} ]; do sleep 0.05; done', timeout: 60}}\n"
    )
    first = deploy.popen("apply", str(slow), "--yes")
    lock = kimi.host.state_dir / "lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (lock.exists() and "run_id" in lock.read_text()):
        time.sleep(0.05)
    try:
        second = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    finally:
        go.touch()  # the first run holds the lock until the second has been refused
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert second.exit_code == 4, second.output
    assert "locked by run" in second.output
    holder = json.loads(lock.read_text())
    assert holder["run_id"] in second.output and holder["user"] in second.output


def test_unreachable_host_is_not_attempted(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    kimi.host.stop()
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
    assert result.exit_code == 4, result.output
    assert "connection refused" in result.output


def test_no_terminal_and_no_yes_refuses(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    before = sha256(kimi.model_file)
    result = deploy("apply", "kimi-eagle3")
    assert result.exit_code == 2, result.output
    assert "--yes" in result.stderr and "Traceback" not in result.output
    assert sha256(kimi.model_file) == before


def test_bad_input_is_one_line_and_touches_no_host(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path
) -> None:
    kimi, deploy = kimi_059
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nhosts: all\nsteps:\n  - backup: {path: '{{ nowhere_defined }}/x'}\n")
    result = deploy("apply", str(bad), "--yes")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml:4" in lines[0] and "nowhere_defined" in lines[0], (
        result.stderr
    )
    assert not kimi.host.state_dir.exists()
    assert "Accepted publickey" not in kimi.host.log_text()


def test_validate_checks_everything_offline(kimi_059: tuple[KimiHost, Deploy]) -> None:
    kimi, deploy = kimi_059
    kimi.host.stop()  # offline: a stopped host must not matter
    result = deploy("validate")
    assert result.exit_code == 0, result.output
    assert "ok:" in result.stdout


def _through_ssh_config(tmp_path: Path, kimi: KimiHost, alias: str, config: str) -> Path:
    """Write ``config`` as ~/.ssh/config and an inventory whose one host is the ``alias`` it
    defines, with ``kimi``'s known_hosts, state_dir and model file; return the inventory."""
    ssh_dir = Path(os.environ["HOME"]) / ".ssh"
    ssh_dir.mkdir(exist_ok=True)
    (ssh_dir / "config").write_text(config)
    inventory = tmp_path / f"{alias}.yaml"
    inventory.write_text(
        f"hosts:\n  gpu-1:\n    address: {alias}\n"
        f"    known_hosts: {kimi.host.known_hosts}\n    state_dir: {kimi.host.state_dir}\n"
        f"    vars: {{model_file: {kimi.model_file}, sglang_python: {sys.executable}}}\n"
    )
    return inventory


def test_ssh_config_alias_is_resolved_by_fabric(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path
) -> None:
    """An inventory may name an ~/.ssh/config alias: HostName, Port, User, IdentityFile."""
    kimi, deploy = kimi_059
    inventory = _through_ssh_config(
        tmp_path,
        kimi,
        "gpu-alias",
        f"Host gpu-alias\n  HostName 127.0.0.1\n  Port {kimi.host.port}\n  User {kimi.host.user}\n"
        f"  IdentityFile {kimi.host.identity_file}\n",
    )
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "-i", str(inventory))
    assert result.exit_code == 0, result.output
    assert b"def set_eagle3_layers_to_capture" in kimi.model_file.read_bytes()


def test_proxyjump_hops_are_held_to_known_hosts(
    sshd_sandbox: SshdSandbox, make_kimi_hosts, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """ProxyJump from ~/.ssh/config works, and the jump host's key is checked too.

    The hop is named ``localhost`` (Fabric skips a hop whose name equals the target's address).
    """
    hosts, deploy = make_kimi_hosts(["0.5.9"])
    target = hosts[0]
    jump = sshd_sandbox.start("jump")
    inventory = _through_ssh_config(
        tmp_path,
        target,
        "gpu-behind-jump",
        f"Host gpu-behind-jump\n  HostName 127.0.0.1\n  Port {target.host.port}\n"
        f"  User {target.host.user}\n  IdentityFile {target.host.identity_file}\n"
        f"  ProxyJump {jump.user}@localhost:{jump.port}\n"
        f"Host localhost\n  IdentityFile {jump.identity_file}\n",
    )
    refused = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "-i", str(inventory))
    assert refused.exit_code == 4, refused.output
    assert f"[localhost]:{jump.port}" in refused.output and "SHA256:" in refused.output
    assert b"def set_eagle3_layers_to_capture" not in target.model_file.read_bytes()

    jump_line = jump.host_key_line().replace("[127.0.0.1]", "[localhost]", 1)
    with target.host.known_hosts.open("a") as known:
        known.write(jump_line.rstrip("\n") + "\n")
    result = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "-i", str(inventory))
    assert result.exit_code == 0, result.output
    assert b"def set_eagle3_layers_to_capture" in target.model_file.read_bytes()
