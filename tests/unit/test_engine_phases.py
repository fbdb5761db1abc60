"""The engine's named phases (issue 31, point 1): every step's ``before_first_change`` runs once,
in the "before first change" phase, just before the run's first change — with the host still
as it was — and never under --check or in a run that changes nothing. The throughput gate's
baseline is taken there (`deploy.steps.gate_throughput`), so no step looks ahead for another.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.engine.step_run import Phase
from deploy.steps import register, unregister
from deploy.steps.base import Planned, Step, StepContext
from tests.unit.local_rig import LocalRig

#: What the throwaway step saw, per call of its hooks.
SEEN: list[dict[str, Any]] = []


class WitnessArgs(StrictModel):
    """Watch a file (a throwaway step)."""

    path: str = Field(description="The file to look at.")


class WitnessStep(Step[WitnessArgs]):
    kind = "witness"
    example = "- witness: {path: /a}\n"

    def before_first_change(self, ctx: StepContext) -> None:
        SEEN.append(
            {
                "hook": "before_first_change",
                "phase": ctx.phase,
                "step_index": ctx.step_index,
                "content": Path(self.args.path).read_text(),
                "changed": ctx.changed,
            }
        )

    def plan(self, ctx: StepContext) -> Planned:
        SEEN.append({"hook": "plan", "phase": ctx.phase})
        return Planned(summary="watched", noop=True)

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        SEEN.append({"hook": "verify", "phase": ctx.phase})


@pytest.fixture
def witness() -> Iterator[None]:
    SEEN.clear()
    register(WitnessStep)
    try:
        yield
    finally:
        unregister("witness")


def _rig(tmp_path: Path) -> tuple[LocalRig, Path]:
    rig = LocalRig(tmp_path / "host")
    target = rig.files / "conf.txt"
    target.write_text("old\n")
    return rig, target


def _playbook(rig: LocalRig, target: Path) -> Path:
    # The witness comes after the change: it is seen anyway, before the change is made.
    return rig.playbook(
        "phases",
        [
            {"append": {"path": str(target), "text": "new\n"}},
            {"witness": {"path": str(target)}},
        ],
    )


def test_before_first_change_runs_once_before_the_change_with_the_host_as_it_was(
    tmp_path: Path, witness: None
) -> None:
    rig, target = _rig(tmp_path)
    run = rig.apply(_playbook(rig, target))
    assert run.exit_code == 0
    assert target.read_text() == "old\nnew\n"
    hooks = [seen for seen in SEEN if seen["hook"] == "before_first_change"]
    assert hooks == [
        {
            "hook": "before_first_change",
            "phase": Phase.BEFORE_FIRST_CHANGE.value,
            "step_index": 1,  # the witness's own index, though the append was running
            "content": "old\n",  # the append's write had not been made
            "changed": False,
        }
    ]
    assert {"hook": "plan", "phase": Phase.CHANGE.value} in SEEN
    assert {"hook": "verify", "phase": Phase.VERIFY.value} in SEEN
    assert [p.value for p in Phase] == [
        "preflight",
        "before first change",
        "change",
        "verify",
        "commit",
    ]


def test_no_first_change_phase_under_check_or_when_nothing_changes(
    tmp_path: Path, witness: None
) -> None:
    rig, target = _rig(tmp_path)
    playbook = _playbook(rig, target)
    assert rig.apply(playbook, check=True).exit_code == 0
    assert not [seen for seen in SEEN if seen["hook"] == "before_first_change"]
    assert rig.apply(playbook).exit_code == 0
    SEEN.clear()
    rerun = rig.apply(playbook)  # the text is there: nothing changes
    assert rerun.exit_code == 0 and rerun.hosts[0].outcome == "unchanged"
    assert [seen["hook"] for seen in SEEN] == ["plan", "verify"]
