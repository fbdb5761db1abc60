"""The fault matrix over the file part of kimi-eagle3: cut or SIGKILL at every boundary.

For each boundary of the run (see `FILE_BOUNDARIES`), the SSH connection is cut at the proxy,
or the deploy process is SIGKILLed while the proxy holds its next request. Right after the
fault the file must be whole (before or after, by sha256: the rename is atomic); `deploy
status` must name the unfinished run when the journal has no end; and the next command must
leave the host exactly before (``rollback``) or exactly after (``apply``), with no temp file
beside the target and no unfinished journal.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.faults.conftest import FaultHost
from tests.faults.harness import (
    FILE_BOUNDARIES,
    Boundary,
    HelperStop,
    Outcome,
    faulted_apply,
    helper_stopped,
    judge,
    judge_next_command,
)

CASES = [
    pytest.param(
        fault,
        boundary,
        next_command,
        id=f"{fault}-{boundary.name}-then-{next_command}",
        # CI: every boundary cut; every other one killed. The report: all of them.
        marks=[pytest.mark.slow] if fault == "kill" and position % 2 else [],
    )
    for position, boundary in enumerate(FILE_BOUNDARIES)
    for fault, next_command in (("cut", "apply"), ("kill", "rollback"))
]


def status_is_truthful(host: FaultHost, unfinished: bool) -> bool:
    """`deploy status --json` lists an unfinished run exactly when the journal has no end."""
    result = host.deploy("status", "--json")
    if result.exit_code != 0:
        return False
    (seen,) = json.loads(result.stdout)
    return bool(seen.get("unfinished")) == unfinished


@pytest.mark.parametrize(("fault", "boundary", "next_command"), CASES)
def test_fault_at_boundary(
    make_fault_host, fault: str, boundary: Boundary, next_command: str
) -> None:  # type: ignore[no-untyped-def]
    host = make_fault_host()
    faulted = faulted_apply(host, fault, boundary)
    assert faulted.state_after in ("before", "after"), "the file is never half-written"
    truthful_status = status_is_truthful(host, faulted.unfinished_after)

    record, next_output = judge_next_command(
        host, fault, boundary.name, faulted, next_command, status_truthful=truthful_status
    )
    assert record.bytes_lost == 0
    assert record.consistent, f"{record}\n{next_output}"
    assert record.truthful, f"{record}\nfault run said:\n{faulted.output}\nnext:\n{next_output}"


TWO_WRITES = """\
name: two-writes
hosts: all
steps:
  - python_insert:
      path: "{{ model_file }}"
      class: KimiK25ForConditionalGeneration
      code: |
        def get_embed_and_head(self):
            return self.language_model.get_embed_and_head()
  - append: {path: "{{ model_file }}", text: "# patched by deploy\\n"}
"""


@pytest.mark.parametrize("fault", ["cut", "kill"])
def test_fault_between_two_writes_of_one_file(make_fault_host, tmp_path, fault: str) -> None:  # type: ignore[no-untyped-def]
    """A run that edits one file twice and dies between the writes is still undone cleanly.

    Journal: begin, backup, intent, done, intent — the fault lands after the second intent,
    so the file holds the *first* write's content: ours, and undone, not a foreign change.
    The run sends both writes without waiting, so no client-side moment separates them: the
    host's file helper stops as the second write's request reaches it (the second intent is
    fsynced by then), the fault is injected, and the helper is killed before that write.
    """
    host: FaultHost = make_fault_host()
    playbook = tmp_path / "two-writes.yaml"
    playbook.write_text(TWO_WRITES)
    process: dict[str, subprocess.Popen[str]] = {}
    host.old_runs = set(host.runs())
    second_write = HelperStop("write", "{model_file}", nth=2)
    with helper_stopped(host, second_write, fault, process) as stopped:
        process["p"] = host.deploy.popen("apply", str(playbook), "--yes")
        out, err = process["p"].communicate(timeout=120)
    assert stopped, f"the helper never received the second write:\n{out}{err}"
    assert stopped["journal_lines"] == 5, f"not between the writes: {stopped}"
    assert host.file_state() == "other", "the first write landed, the second did not"
    result = host.deploy("rollback", "--yes")
    record = judge(
        host,
        fault,
        "between two writes of one file",
        Outcome(process["p"].returncode, "", out + err, "other", "n/a", True),
        "rollback",
        Outcome(result.exit_code, "", result.output),
        expect="before",
        status_truthful=True,
    )
    assert record.consistent and record.truthful and record.bytes_lost == 0, (
        f"{record}\n{result.output}"
    )
