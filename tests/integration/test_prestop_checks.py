"""Everything checkable is checked before the running server is stopped (issue 30, point 3).

Over real sshd with the stand-in (whose command line is SGLang 0.5.9's argparse and whose load
fails on a missing draft model): a typo in the draft model path or in a flag is found before
the stop (exit 4, the operator's server untouched, nothing changed); a NameError in the
patched module is found by importing it with the server's own interpreter once the new file
is in place, before the stop (exit 1, the file put back, the server untouched).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from deploy.sandbox import gpu_host
from deploy.sandbox.gpu_host import GpuHost, listener_cmdline, listener_pid
from tests.integration.conftest import Deploy, sha256

BROKEN_IMPORT = """
name: broken-import
hosts: all
services:
  sglang:
    command: "{{ sglang_python | quote }} -m sglang.launch_server --model-path m --port {{ sglang_port }}"
    cwd: "{{ sglang_cwd }}"
    env: {PYTHONPATH: "{{ sglang_pythonpath }}"}
    port: "{{ sglang_port }}"
    match: sglang.launch_server
steps:
  - python_insert:
      path: "{{ model_file }}"
      class: KimiK25ForConditionalGeneration
      code: |
        EAGLE3_LAYERS = default_layers()
  - restart:
      service: sglang
      args: {set: {--speculative-algorithm: EAGLE3}}
      imports: {sglang.srt.models.kimi_k25: "{{ model_file }}"}
"""


def _untouched(gpu: GpuHost, pid: int | None, digest: str) -> None:
    assert listener_pid(gpu.port) == pid, "the operator's server was not stopped"
    assert sha256(gpu.model_file) == digest, "the file is as it was"


def test_a_draft_model_path_that_cannot_load_is_refused_before_the_stop(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    gpu, deploy = serving_059
    pid, digest = listener_pid(gpu.port), sha256(gpu.model_file)
    for path, why in (
        ("/models/kimi-eagle3-typo", "does not exist"),
        (str(gpu.ssh.root), "holds no config.json"),
    ):
        result = deploy("apply", "kimi-eagle3", "--yes", "-e", f"draft_model_path={path}")
        assert result.exit_code == 4, result.output
        assert f"the draft model path {path} {why}" in result.output, result.output
        assert "nothing was stopped or changed" in result.output
        _untouched(gpu, pid, digest)
    check = deploy("apply", "kimi-eagle3", "--check", "-e", "draft_model_path=/no/such")
    assert check.exit_code == 4 and "does not exist" in check.output, check.output
    draft = gpu.ssh.root / "draft-model"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    ok = deploy("apply", "kimi-eagle3", "--yes", "-e", f"draft_model_path={draft}")
    assert ok.exit_code == 0, ok.output


def test_a_refusal_before_the_stop_is_said_once_in_the_plan(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    """``--check`` printed a preflight refusal twice: as the host's error ("step 5 failed:
    ...") and as the failed step's summary just below it. The step's line says it, once."""
    gpu, deploy = serving_059
    pid, digest = listener_pid(gpu.port), sha256(gpu.model_file)
    check = deploy("apply", "kimi-eagle3", "--check", "-e", "draft_model_path=/no/such")
    assert check.exit_code == 4, check.output
    _untouched(gpu, pid, digest)
    assert check.output.count("the draft model path /no/such does not exist") == 1, check.output
    failed = next(line for line in check.output.splitlines() if line.strip().startswith("5."))
    assert "failed" in failed, check.output
    assert "step 5 failed" not in check.output, check.output


def test_check_shows_every_change_and_the_refusal_and_apply_lists_every_step(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    """A step refused before the stop hid the steps in front of it: ``--check`` showed the
    refusal without the file's diff, which the operator still had to see before fixing the
    draft path, and the report of either run left those steps out altogether."""
    gpu, deploy = serving_059
    pid, digest = listener_pid(gpu.port), sha256(gpu.model_file)
    check = deploy("apply", "kimi-eagle3", "--check", "-e", "draft_model_path=/no/such", "--json")
    assert check.exit_code == 4, check.output
    host = json.loads(check.stdout)["hosts"][0]
    statuses = [step["status"] for step in host["steps"]]
    assert statuses == ["ok", "would change", "ok", "ok", "failed", *["not run"] * 3], statuses
    assert "+    def set_eagle3_layers_to_capture(" in host["steps"][1]["diff"]
    assert host["outcome"] == "not attempted" and host["changed_files"] == [], host
    applied = deploy("apply", "kimi-eagle3", "--yes", "-e", "draft_model_path=/no/such", "--json")
    assert applied.exit_code == 4, applied.output
    statuses = [step["status"] for step in json.loads(applied.stdout)["hosts"][0]["steps"]]
    assert statuses == [*["not run"] * 4, "failed", *["not run"] * 3], statuses
    _untouched(gpu, pid, digest)


def test_a_flag_the_servers_argparse_refuses_is_found_before_the_stop(
    serving_059: tuple[GpuHost, Deploy], tmp_path: Path
) -> None:
    gpu, deploy = serving_059
    pid, digest = listener_pid(gpu.port), sha256(gpu.model_file)
    playbook = tmp_path / "typo.yaml"
    playbook.write_text(
        BROKEN_IMPORT.replace("EAGLE3_LAYERS = default_layers()", "pass")
        .replace("class: KimiK25", "if_exists: keep\n      class: KimiK25")
        .replace("{--speculative-algorithm: EAGLE3}", "{--speculative-algorithm: eagle3}")
        .replace(
            "      code: |\n        pass\n",
            "      code: |\n        def get_embed_and_head(self):\n            return None\n",
        )
    )
    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 4, result.output
    error = json.loads(result.stdout)["hosts"][0]["error"]
    assert "the new command line against the server's argument parser failed" in error, error
    assert "invalid choice: 'eagle3'" in error, error
    _untouched(gpu, pid, digest)


def test_a_name_error_in_the_patched_module_costs_seconds_not_a_load(
    serving_059: tuple[GpuHost, Deploy], tmp_path: Path
) -> None:
    gpu, deploy = serving_059
    gpu.configure(eagle3_load_seconds=600.0)  # a load that would take ten minutes
    pid, digest, old = listener_pid(gpu.port), sha256(gpu.model_file), listener_cmdline(gpu.port)
    playbook = tmp_path / "broken.yaml"
    playbook.write_text(BROKEN_IMPORT)
    result = deploy("apply", str(playbook), "--yes", "--json", timeout=120)
    assert result.exit_code == 1, result.output
    host = json.loads(result.stdout)["hosts"][0]
    assert host["outcome"] == "rolled back", host
    assert "NameError: name 'default_layers' is not defined" in host["error"], host["error"]
    assert "nothing was stopped" in host["error"]
    _untouched(gpu, pid, digest)
    assert listener_cmdline(gpu.port) == old


def test_another_users_job_on_the_servers_gpus_is_found_before_the_stop(
    serving_059: tuple[GpuHost, Deploy],
) -> None:
    """A compute process on the server's GPUs outside its process tree would fail the
    after-stop memory check with the old server already stopped: found before the stop."""
    gpu, deploy = serving_059
    pid, digest = listener_pid(gpu.port), sha256(gpu.model_file)
    job = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        gpu_host.hold_gpu(gpu, job.pid, 1)
        result = deploy("apply", "kimi-eagle3", "--yes")
        assert result.exit_code == 4, result.output
        assert f"GPU 1 is used by pid {job.pid} (python3, uid 0, 30000 MiB)" in result.output
        assert "outside the server's process tree" in result.output
        _untouched(gpu, pid, digest)
    finally:
        job.kill()
        job.wait()
    ok = deploy("apply", "kimi-eagle3", "--yes")
    assert ok.exit_code == 0, ok.output
