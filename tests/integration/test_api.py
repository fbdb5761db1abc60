"""The Python API (issue 34, point 3) over real sshd: ``from deploy import plan, apply,
rollback`` from a worker thread, cancellation by the caller's token, no click, and the
Fabric task of docs/examples/fabfile.py run by ``fab``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deploy.report.json_schema import SCHEMA
from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost
from tests.integration.conftest import REPO, Deploy, KimiHost, sha256
from tests.integration.test_fleet import write_playbook

pytestmark = pytest.mark.ssh
FILES_ONLY = ["service"]


def _in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a worker thread (not the main one: no signal handler could be set there);
    its result, or its exception raised here."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=work, name="api-caller")
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the API call did not return"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_plan_apply_rollback_from_a_worker_thread(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    import deploy
    from deploy.engine.results import RunResult

    (kimi,), cli = make_kimi_hosts(["0.5.9"])
    original = kimi.model_file.read_bytes()
    common: dict[str, Any] = {"inventory": cli.inventory, "skip_tags": FILES_ONLY}

    planned = _in_thread(lambda: deploy.plan("kimi-eagle3", **common))
    assert isinstance(planned, RunResult) and planned.check_mode
    assert planned.pending == ["gpu-1"] and planned.exit_code == 0
    assert kimi.model_file.read_bytes() == original, "a plan touches nothing"
    jsonschema.validate(planned.to_dict(), SCHEMA)

    applied = _in_thread(lambda: deploy.apply("kimi-eagle3", **common))
    assert applied.exit_code == 0, applied.to_dict()
    (host,) = applied.hosts
    assert host.outcome == "changed" and host.changed_files == [str(kimi.model_file)]
    assert kimi.model_file.read_bytes().count(b"    def ") > original.count(b"    def ")
    jsonschema.validate(applied.to_dict(), SCHEMA)
    listed = json.loads(cli("history", "--json").stdout)
    assert [r["run_id"] for r in listed] == [applied.run_id], "recorded as the CLI records"

    again = _in_thread(lambda: deploy.plan("kimi-eagle3", **common))
    assert again.pending == [], "in the desired state: nothing would change"

    rolled = _in_thread(lambda: deploy.rollback(inventory=cli.inventory))
    assert rolled.exit_code == 0 and rolled.target_run == applied.run_id
    assert [h.outcome for h in rolled.hosts] == ["restored"]
    assert kimi.model_file.read_bytes() == original
    twice = _in_thread(lambda: deploy.rollback(inventory=cli.inventory))
    assert twice.exit_code == 0 and [h.outcome for h in twice.hosts] == ["nothing to do"]
    elsewhere = cli.inventory.with_name("other.yaml")
    elsewhere.write_text(cli.inventory.read_text())
    nothing = _in_thread(lambda: deploy.rollback(inventory=elsewhere))
    assert nothing.hosts == [] and nothing.exit_code == 0
    assert nothing.stopped is not None and "nothing to roll back" in nothing.stopped

    from deploy.errors import InputError

    with pytest.raises(InputError, match="no-such-playbook"):
        _in_thread(lambda: deploy.apply("no-such-playbook", inventory=cli.inventory))


def test_the_callers_token_cancels_a_run_waiting_on_a_host(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    """Cancelled while the host runs a wait (a check that polls for a file): the run starts no
    new step, rolls the host back as for a failure and says why; a second call is not held."""
    import deploy

    (kimi,), cli = make_kimi_hosts(["0.5.9"])
    original = sha256(kimi.model_file)
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    playbook = write_playbook(
        tmp_path,
        "slow",
        check=f"touch {waiting}; while [ ! -e {go} ]; do sleep 0.05; done",
        header="",
    )
    token = deploy.CancelToken()
    box: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: box.update(run=deploy.apply(playbook, inventory=cli.inventory, cancel=token))
    )
    worker.start()
    deadline = time.monotonic() + 60
    while not waiting.exists():
        assert time.monotonic() < deadline and worker.is_alive(), "the run never began its wait"
        time.sleep(0.02)
    assert sha256(kimi.model_file) != original, "the change is made; the check waits"

    token.cancel()
    go.touch()  # the wait ends; its step's end is where the cancel is seen
    worker.join(timeout=60)

    assert not worker.is_alive()
    run = box["run"]
    (host,) = run.hosts
    assert run.exit_code == 1 and host.outcome == "rolled back", run.to_dict()
    assert "cancelled by the caller" in (host.error or ""), host.error
    assert sha256(kimi.model_file) == original, "put back byte for byte"
    assert token.cancelled
    # The workstation's lock went with the call: the next run is not refused.
    assert deploy.apply(playbook, inventory=cli.inventory).exit_code == 0


def test_the_api_imports_no_click_and_prints_nothing(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    _, cli = make_kimi_hosts(["0.5.9"])
    code = (
        "import json, sys\n"
        "import deploy\n"
        "cheap = sorted(m for m in sys.modules if m.startswith('deploy'))\n"
        "from deploy import plan\n"
        f"report = plan('kimi-eagle3', inventory={str(cli.inventory)!r}, skip_tags=['service'])\n"
        "sys.stderr.write(json.dumps({'cheap': cheap, 'exit': report.exit_code,\n"
        "    'pending': report.pending, 'modules': sorted(sys.modules)}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cli.workdir,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", "a library prints nothing"
    result = json.loads(proc.stderr)
    assert result["cheap"] == ["deploy"], "import deploy loads nothing else"
    assert result["exit"] == 0 and result["pending"] == ["gpu-1"]
    modules = set(result["modules"])
    assert not {m for m in modules if m == "click" or m.startswith("click.")}, "no click"
    assert not {m for m in modules if m.startswith("deploy.cli")}, "no CLI"


def test_the_documented_fabric_task_applies_and_rolls_back(
    make_gpu_hosts: Callable[..., tuple[list[GpuHost], Deploy]],
) -> None:
    """docs/examples/fabfile.py, run by ``fab`` as docs/api.md shows: a plan, then the whole
    kimi-eagle3 (restart, health, gate) on a host serving the stand-in SGLang."""
    (gpu,), cli = make_gpu_hosts(["0.5.9"], tokens_per_s=54.1, eagle3_tokens_per_s=96.1)
    gpu_host.start_old_server(gpu, timeout=60)
    original = gpu.model_file.read_bytes()
    fab = Path(sys.executable).parent / "fab"
    base = [str(fab), "--search-root", str(REPO / "docs/examples"), "eagle3"]
    args = ["--inventory", str(cli.inventory), "--playbook", "kimi-eagle3"]

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args, *extra], cwd=cli.workdir, capture_output=True, text=True,
            timeout=180, check=False, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip

    checked = run("--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "gpu-1: would change" in checked.stdout
    assert gpu.model_file.read_bytes() == original

    applied = run()
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert re.search(r"^gpu-1: changed \([\d.]+ tok/s at c1\)$", applied.stdout, re.M)
    assert gpu.model_file.read_bytes() != original
    back = cli("rollback", "--yes")
    assert back.exit_code == 0 and gpu.model_file.read_bytes() == original, back.output


def test_a_wait_for_another_run_is_cancelled_at_once_and_a_held_job_is_refused(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    """Another run of the job holds the workstation's lock: ``wait_lock`` waits for it, the
    token ends that wait at once (every host skipped, nothing touched), and without a wait
    the call is refused with RunLocked."""
    import deploy
    from deploy.engine import local_lock

    (kimi,), cli = make_kimi_hosts(["0.5.9"])
    original = sha256(kimi.model_file)
    playbook = write_playbook(tmp_path, "held")
    logins = kimi.host.log_text().count("Accepted publickey")
    with local_lock.acquire(playbook, cli.inventory, {"run_id": "other-run", "user": "ops"}):
        with pytest.raises(local_lock.RunLocked, match="other-run by ops"):
            deploy.apply(playbook, inventory=cli.inventory)
        with pytest.raises(local_lock.RunLocked, match=r"after waiting 0\.5 s"):
            deploy.apply(playbook, inventory=cli.inventory, wait_lock=0.5)

        token = deploy.CancelToken()
        threading.Timer(1.0, token.cancel).start()
        began = time.monotonic()
        run = _in_thread(
            lambda: deploy.apply(playbook, inventory=cli.inventory, wait_lock=600, cancel=token)
        )
        took = time.monotonic() - began

    assert took < 10, f"the wait ended {took:.1f} s after the cancel, not at once"
    assert run.exit_code == 4 and [h.outcome for h in run.hosts] == ["skipped"]
    assert run.hosts[0].error == "never touched: cancelled by the caller"
    assert sha256(kimi.model_file) == original
    assert kimi.host.log_text().count("Accepted publickey") == logins, "no host was contacted"


def test_two_threads_run_two_jobs_at_once(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
) -> None:
    """Two calls at once from two threads, each its own inventory and host: both reach the
    desired state, each report names only its own host, the history holds both runs."""
    import deploy

    hosts, cli = make_kimi_hosts(["0.5.9", "0.5.9"])
    other = cli.inventory.with_name("other.yaml")
    other.write_text(cli.inventory.read_text())
    jobs = {"gpu-1": cli.inventory, "gpu-2": other}
    reports: dict[str, Any] = {}
    start = threading.Barrier(2)

    def job(name: str) -> None:
        start.wait()
        reports[name] = deploy.apply(
            "kimi-eagle3", inventory=jobs[name], limit=[name], skip_tags=FILES_ONLY
        )

    workers = [threading.Thread(target=job, args=(name,)) for name in jobs]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert all(not w.is_alive() for w in workers) and len(reports) == 2, reports
    for name, report in reports.items():
        assert [(h.host, h.outcome) for h in report.hosts] == [(name, "changed")]
    assert reports["gpu-1"].run_id != reports["gpu-2"].run_id
    recorded = json.loads(cli("history", "--all", "--json").stdout)
    assert sorted(r["run_id"] for r in recorded) == sorted(r.run_id for r in reports.values())
    assert all(b"def get_embed_and_head" in h.model_file.read_bytes() for h in hosts)
