"""``--check`` with a step refused by its pre-checks (preflight) says what ``apply`` would do.

The real run stops at the refusal before any step runs (exit 4, nothing touched). ``--check``
also plans the steps in front of the refusing one, to show their changes; one of those may
fail to plan (a file it edits is missing, say). That must not replace the refusal as the
host's outcome: apply would never reach that step, it would be refused first.

Two throwaway steps (registered for these tests only) play that on a `LocalHost` through the
real engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.errors import NothingTouched, StepFailed
from deploy.steps import register, unregister
from deploy.steps.base import Planned, Step, StepContext
from tests.unit.local_rig import LocalRig

REFUSAL = "the draft model path /no/such does not exist"
UNPLANNABLE = "cannot plan: /etc/app.conf is missing"


class NoteArgs(StrictModel):
    """A throwaway step's one argument."""

    note: str = Field(default="", description="Unused.")


class RefusedStep(Step[NoteArgs]):
    kind = "refused_by_preflight"
    example = """\
- refused_by_preflight: {}
"""

    def preflight(self, ctx: StepContext) -> None:
        raise NothingTouched(REFUSAL)

    def plan(self, ctx: StepContext) -> Planned:
        raise AssertionError("a refused step is never planned")


class UnplannableStep(Step[NoteArgs]):
    kind = "fails_to_plan"
    example = """\
- fails_to_plan: {}
"""

    def plan(self, ctx: StepContext) -> Planned:
        raise StepFailed(UNPLANNABLE)


@pytest.fixture
def steps() -> Iterator[None]:
    register(RefusedStep)
    register(UnplannableStep)
    try:
        yield
    finally:
        unregister(RefusedStep.kind)
        unregister(UnplannableStep.kind)


def test_a_step_in_front_that_fails_to_plan_does_not_hide_the_refusal(
    tmp_path: Path, steps: None
) -> None:
    rig = LocalRig(tmp_path / "host")
    unplannable = {"fails_to_plan": {}}
    book = rig.playbook("pb", [unplannable, unplannable, {"refused_by_preflight": {}}, unplannable])
    applied = rig.apply(book)
    assert applied.exit_code == 4
    assert [s.status for s in applied.hosts[0].steps] == ["not run", "not run", "failed", "not run"]

    checked = rig.apply(book, check=True)
    host = checked.hosts[0]
    assert checked.exit_code == applied.exit_code == 4, host.error
    assert host.outcome == "not attempted", host.error
    assert [s.status for s in host.steps] == ["failed", "not run", "failed", "not run"]
    assert [s.summary for s in host.steps] == [UNPLANNABLE, "", REFUSAL, ""]
    assert host.error == f"step 3 failed: {REFUSAL}"
    assert host.failed_step == 2
    assert rig.runs() == []
