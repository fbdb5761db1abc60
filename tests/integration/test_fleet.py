"""Many hosts over real sshd (issue 4): parallel runs, a dead host, rolling batches, status.

The playbooks here are written by the tests (the file change and a check that fails where a
host carries a ``broken`` marker), so that they do not depend on the service steps of the
shipped playbook.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema

from deploy.report.json_schema import SCHEMA
from tests.integration.conftest import sha256

CLASS = "KimiK25ForConditionalGeneration"


def write_playbook(
    directory: Path, name: str, *, check: str = "true", header: str = "", timeout: int = 60
) -> Path:
    """A playbook that inserts one method into the kimi class, then runs ``check`` on the host.

    ``{{ root }}`` in ``check`` is the host's sandbox root (a host var of every sandbox host).
    """
    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nhosts: all\n{header}"
        "steps:\n"
        "  - name: Add get_embed_and_head\n"
        "    python_insert:\n"
        '      path: "{{ model_file }}"\n'
        f"      class: {CLASS}\n"
        "      where: end\n"
        "      code: |\n"
        "        def get_embed_and_head(self):\n"
        "            return self.language_model.get_embed_and_head()\n"
        "  - name: Host check\n"
        f"    verify_command: {{run: {json.dumps(check)}, timeout: {timeout}}}\n"
    )
    return path


def broken_check() -> str:
    return "test ! -e {{ root }}/broken"


def report(stdout: str) -> dict:  # type: ignore[type-arg]
    document = json.loads(stdout)
    jsonschema.validate(document, SCHEMA)
    return document  # type: ignore[no-any-return]


def outcomes(document: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {h["host"]: h["outcome"] for h in document["hosts"]}


def test_parallel_run_with_a_dead_host(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9", "0.5.9", "0.5.9"])
    dead = hosts[1]
    dead.host.stop()
    before = sha256(dead.model_file)
    # A barrier: each live host's check waits until both have reached it. Run one host after
    # the other, the first would wait alone until its timeout and fail.
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    meet = (
        f"touch {barrier}/{{{{ inventory_hostname }}}}; "
        f"while [ $(ls {barrier} | wc -l) -lt 2 ]; do sleep 0.05; done"
    )
    playbook = write_playbook(tmp_path, "parallel", check=meet, timeout=20)

    result = deploy("apply", str(playbook), "--yes", "--json")

    assert result.exit_code == 4, result.output
    document = report(result.stdout)
    assert outcomes(document) == {"gpu-1": "changed", "gpu-2": "not attempted", "gpu-3": "changed"}
    assert "connection refused" in document["hosts"][1]["error"]
    assert document["hosts"][1]["steps"] == []
    assert sha256(dead.model_file) == before and not dead.host.state_dir.exists()
    assert sorted(p.name for p in barrier.iterdir()) == ["gpu-1", "gpu-3"]


def test_rolling_batches_stop_after_max_fail(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9", "0.5.9", "0.5.9", None, "0.5.9"])
    for broken in (hosts[1], hosts[2]):
        (broken.host.root / "broken").write_text("")
    originals = {h.host.name: h.model_file.read_bytes() for h in hosts if h.model_file.exists()}
    playbook = write_playbook(
        tmp_path, "rolling", check=broken_check(), header="serial: '40%'\nmax_fail: 1\n"
    )

    result = deploy("apply", str(playbook), "--yes")

    assert result.exit_code == 1, result.output
    out = result.stdout
    # 40% of 5 hosts: batches of 2, 2, 1. Batch 1 has one failure (allowed), batch 2 two.
    assert "Rolling batches: 3 (2, 2, 1 host(s))." in out
    assert "Stopped: batch 2 of 3: 2 of 2 host(s) failed, more than max_fail 1 allows" in out
    lines = {
        line.split(":")[0].strip(): line.split(":", 1)[1].strip()
        for line in out.splitlines()
        if line.startswith("  ") and ":" in line
    }
    assert lines["new state"] == "gpu-1"
    assert lines["rolled back"] == "gpu-2, gpu-3"
    assert lines["failed, nothing changed"] == "gpu-4"
    assert lines["never touched"] == "gpu-5"
    assert "batch 2 of 3: gpu-3, gpu-4" in result.stderr
    assert hosts[0].model_file.read_bytes() != originals["gpu-1"]
    for kimi in (hosts[1], hosts[2], hosts[4]):
        assert kimi.model_file.read_bytes() == originals[kimi.host.name], kimi.host.name
    assert not hosts[4].host.state_dir.exists(), "a skipped host is never contacted"
    assert "Accepted publickey" not in hosts[4].host.log_text()

    # The workstation's record says the same, per host and in full.
    listed = deploy("history", "--host", "gpu-5")
    assert listed.exit_code == 0 and "skipped" in listed.stdout, listed.output
    run_id = listed.stdout.splitlines()[-1].split()[0]
    shown = deploy("show", run_id[:18], "--json")
    assert shown.exit_code == 0, shown.output
    document = report(shown.stdout)
    assert document["batches"] == [["gpu-1", "gpu-2"], ["gpu-3", "gpu-4"], ["gpu-5"]]
    assert outcomes(document)["gpu-5"] == "skipped"


def test_status_shows_the_lock_holder_and_the_last_run(make_kimi_hosts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hosts, deploy = make_kimi_hosts(["0.5.9", "0.5.9"])
    hosts[1].host.stop()
    go = tmp_path / "go"
    playbook = write_playbook(tmp_path, "held", check=f"while [ ! -e {go} ]; do sleep 0.05; done")
    first = deploy.popen("apply", str(playbook), "--yes", "-l", "gpu-1")
    original = sha256(hosts[0].model_file)
    deadline = time.monotonic() + 30
    while sha256(hosts[0].model_file) == original:
        assert time.monotonic() < deadline and first.poll() is None, (
            "the run never changed the file"
        )
        time.sleep(0.05)

    during = deploy("status", "--json")

    go.touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, out + err
    assert during.exit_code == 4, during.output  # gpu-2 cannot be looked at
    live, dead = json.loads(during.stdout)
    run_id = json.loads((hosts[0].host.state_dir / "lock").read_text())["run_id"]
    assert live["lock"] == "held" and live["lock_holder"]["run_id"] == run_id
    assert live["last_run"] == {**live["last_run"], "run_id": run_id, "state": "running"}
    assert live["unfinished"] == []
    assert not dead["reachable"] and "connection refused" in dead["error"]

    after = deploy("status", "-l", "gpu-1")
    assert after.exit_code == 0, after.output
    host, last = after.stdout.splitlines()[:2]
    assert host.startswith("gpu-1: lock free, ") and last == f"  last run {run_id} (held): changed"
