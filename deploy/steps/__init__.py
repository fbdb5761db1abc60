"""Steps: one module per action, all with the same lifecycle (see `deploy.steps.base`)."""

from __future__ import annotations

from deploy.config.steps import StepCommon, action_of
from deploy.steps.base import Step


def build_step(entry: StepCommon, index: int) -> Step:
    """The step object for a validated playbook entry."""
    from deploy.steps.append import AppendStep
    from deploy.steps.backup import BackupStep
    from deploy.steps.gate_throughput import GateThroughputStep
    from deploy.steps.patch import PatchStep
    from deploy.steps.python_insert import PythonInsertStep
    from deploy.steps.service import RestartStep, StartStep, StopStep
    from deploy.steps.smoke import SmokeStep
    from deploy.steps.verify_command import VerifyCommandStep
    from deploy.steps.verify_python import VerifyPythonStep
    from deploy.steps.verify_tail import VerifyTailStep
    from deploy.steps.wait_healthy import WaitHealthyStep

    classes: dict[str, type[Step]] = {
        cls.kind: cls
        for cls in (
            BackupStep,
            PythonInsertStep,
            PatchStep,
            AppendStep,
            VerifyPythonStep,
            VerifyTailStep,
            VerifyCommandStep,
            RestartStep,
            StopStep,
            StartStep,
            WaitHealthyStep,
            SmokeStep,
            GateThroughputStep,
        )
    }
    return classes[action_of(entry)](entry, index)
