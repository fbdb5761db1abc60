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

import pytest

from tests.faults.conftest import FILES_ONLY, FaultHost
from tests.faults.harness import FILE_BOUNDARIES, Boundary, Outcome, faulted_apply, judge

CASES = [
    pytest.param(fault, boundary, next_command, id=f"{fault}-{boundary.name}-then-{next_command}")
    for boundary in FILE_BOUNDARIES
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

    if next_command == "apply":
        result = host.deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes")
        expect = "after"
    else:
        result = host.deploy("rollback", "--yes")
        expect = "before"
    record = judge(
        host,
        fault,
        boundary.name,
        faulted,
        next_command,
        Outcome(result.exit_code, "", result.output),
        expect=expect,
        status_truthful=truthful_status,
    )
    assert record.bytes_lost == 0
    assert record.consistent, f"{record}\n{result.output}"
    assert record.truthful, f"{record}\nfault run said:\n{faulted.output}\nnext:\n{result.output}"
