"""Worker processes, the pure part (`deploy.engine.shards`): how many, who takes a host, frames."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from deploy.engine import shards
from deploy.engine.host_jobs import ApplyJob, RollbackJob
from deploy.engine.results import HostResult, StepResult

REPO = Path(__file__).resolve().parents[2]


def test_one_process_unless_enough_hosts_are_busy_at_once_on_several_cores() -> None:
    per = shards.HOSTS_PER_WORKER
    assert shards.worker_count(None, per - 1, cores=2) == 1
    assert shards.worker_count(None, per, cores=2) == 1 or per < 2  # one worker's worth
    assert shards.worker_count(None, 2 * per, cores=2) == 2
    assert shards.worker_count(None, 10 * per, cores=2) == 2, "never more than the cores"
    assert shards.worker_count(None, 10 * per, cores=1) == 1, "one core: one process"
    assert shards.worker_count(None, 100 * per, cores=64) == shards.MAX_AUTO_WORKERS
    assert shards.worker_count(None, 10 * per, cores=4, shardable=False) == 1


def test_workers_asked_for_are_given_but_never_more_than_hosts() -> None:
    assert shards.worker_count(1, 500, cores=16) == 1
    assert shards.worker_count(3, 6, cores=1) == 3, "--workers is obeyed on one core too"
    assert shards.worker_count(3, 2, cores=4) == 2, "no idle worker process"
    assert shards.worker_count(2, 0, cores=4) == 1
    assert shards.worker_count(0, 1, cores=4) == 1, "0 means choose"


def test_busy_at_once_is_forks_or_the_largest_batch() -> None:
    assert shards.busy_at_once(10, [200]) == 10
    assert shards.busy_at_once(50, [1, 20, 20]) == 20
    assert shards.busy_at_once(10, []) == 0


def test_the_least_busy_live_worker_takes_the_next_host() -> None:
    assert shards.pick([0, 0]) == 0
    assert shards.pick([2, 1, 3]) == 1
    assert shards.pick([None, 5, 4]) == 2
    assert shards.pick([0, None]) == 0
    assert shards.pick([None, None]) is None
    assert shards.pick([]) is None


def _roundtrip(*messages: object) -> list[object]:
    stream = io.BytesIO(b"".join(shards.encode(m) for m in messages))
    out = []
    while (message := shards.read_message(stream)) is not None:
        out.append(message)
    return out


def test_frames_carry_results_jobs_and_a_playbooks_steps() -> None:
    from deploy.config import inventory_file, load

    result = HostResult(host="h", outcome="changed", steps=[StepResult(0, "k", "t", "changed")])
    job = ApplyJob("run-1", "pb", check_mode=True)
    undo = RollbackJob("run-2", "run-1", force=True)
    inventory = inventory_file.load_inventory(REPO / "hosts.yaml")
    playbook = load.load_playbook(REPO / "playbooks" / "kimi-eagle3.yaml")
    plans = load.resolve(inventory, playbook)
    assert plans
    got = _roundtrip(("done", 1, result), ("init", {"job": job}), undo, ("host", 2, plans[0]))
    assert got[0] == ("done", 1, result)
    assert got[1] == ("init", {"job": job}) and got[2] == undo
    plan = got[3][2]  # type: ignore[index]
    assert plan.name == plans[0].name and plan.spec == plans[0].spec
    assert [(i, type(s), s) for i, s in plan.steps] == [
        (i, type(s), s) for i, s in plans[0].steps
    ], "the steps are the same models, field for field"


@pytest.mark.parametrize("cut", [1, 3, 4, 10])
def test_a_frame_cut_short_is_the_end(cut: int) -> None:
    frame = shards.encode(("done", 1, "x"))
    stream = io.BytesIO(shards.encode("first") + frame[:cut])
    assert shards.read_message(stream) == "first"
    assert shards.read_message(stream) is None


def test_secrets_reach_a_worker_through_its_frames_and_a_passphrase_is_asked_once() -> None:
    from deploy.remote import sshauth

    saved = (dict(sshauth._PROVIDED), dict(sshauth._PASSPHRASES), list(sshauth._PROMPTER))
    asked: list[str] = []
    try:
        sshauth.provide_secret("become", "s3cret-become")
        sshauth._PASSPHRASES["Passphrase for key /k"] = "s3cret-key"
        sshauth.set_prompter(lambda prompt: asked.append(prompt) or "typed")
        (sent,) = _roundtrip(("init", {"secrets": sshauth.secrets_for_worker()}))
        assert sshauth.ask_passphrase("Passphrase for key /k2") == "typed"
        assert sshauth.ask_passphrase("Passphrase for key /k2") == "typed"
        assert asked == ["Passphrase for key /k2"], "asked once for all the workers"

        sshauth._PROVIDED.clear()
        sshauth._PASSPHRASES.clear()
        sshauth.take_secrets(sent[1]["secrets"], lambda prompt: "from the parent")  # type: ignore[index]
        assert sshauth._PROVIDED["become"] == "s3cret-become"
        assert sshauth._PASSPHRASES["Passphrase for key /k"] == "s3cret-key"
        assert sshauth._PROMPTER[0]("any") == "from the parent"
        sshauth.take_secrets({**sent[1]["secrets"], "can_ask": False}, lambda p: "x")  # type: ignore[index]
        assert not sshauth._PROMPTER, "a worker asks only where the parent can"
    finally:
        sshauth._PROVIDED.clear()
        sshauth._PROVIDED.update(saved[0])
        sshauth._PASSPHRASES.clear()
        sshauth._PASSPHRASES.update(saved[1])
        sshauth._PROMPTER[:] = saved[2]


def test_a_key_asked_for_here_is_not_asked_again_for_a_worker(tmp_path: Path) -> None:
    """One prompt per key for the whole run: the run's own hosts and the workers' hosts
    (`deploy.remote.sshauth.ask_passphrase`) share the answer, whichever asked first."""
    import subprocess
    from types import SimpleNamespace

    from deploy.remote import sshauth

    key = tmp_path / "locked"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "correct horse", "-f", str(key)], check=True
    )
    settings: Any = SimpleNamespace(name="gpu-1")
    asked: list[str] = []
    saved = list(sshauth._PROMPTER)

    def forget() -> None:
        sshauth._PASSPHRASES.clear()
        sshauth._KEYS.clear()

    try:
        sshauth.set_prompter(lambda prompt: asked.append(prompt) or "correct horse")
        forget()
        assert sshauth._load_key(settings, key, None) is not None  # a host of this process
        assert sshauth.ask_passphrase(f"Passphrase for key {key}") == "correct horse"
        assert len(asked) == 1, "a worker's host does not ask again"

        forget()
        asked.clear()
        assert sshauth.ask_passphrase(f"Passphrase for key {key}") == "correct horse"
        assert sshauth._load_key(settings, key, None) is not None
        assert len(asked) == 1, "a host of this process does not ask again"
    finally:
        forget()
        sshauth._PROMPTER[:] = saved
