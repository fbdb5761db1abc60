"""Steps: one module per action, all with the same lifecycle (see `deploy.steps.base`)."""

from __future__ import annotations

import importlib

from deploy.config.steps import StepCommon, action_of
from deploy.steps.base import Step

#: action -> (module, class). Modules are imported when a playbook first uses the action: a
#: file-only run never loads the service machinery (SSH-tunnelled HTTP, nvidia-smi parsing).
_CLASSES: dict[str, tuple[str, str]] = {
    "backup": ("deploy.steps.backup", "BackupStep"),
    "python_insert": ("deploy.steps.python_insert", "PythonInsertStep"),
    "patch": ("deploy.steps.patch", "PatchStep"),
    "append": ("deploy.steps.append", "AppendStep"),
    "verify_python": ("deploy.steps.verify_python", "VerifyPythonStep"),
    "verify_tail": ("deploy.steps.verify_tail", "VerifyTailStep"),
    "verify_command": ("deploy.steps.verify_command", "VerifyCommandStep"),
    "restart": ("deploy.steps.service", "RestartStep"),
    "stop": ("deploy.steps.service", "StopStep"),
    "start": ("deploy.steps.service", "StartStep"),
    "wait_healthy": ("deploy.steps.wait_healthy", "WaitHealthyStep"),
    "smoke": ("deploy.steps.smoke", "SmokeStep"),
    "gate_throughput": ("deploy.steps.gate_throughput", "GateThroughputStep"),
}


def step_class(kind: str) -> type[Step]:
    """The `Step` subclass for an action key."""
    module, name = _CLASSES[kind]
    cls: type[Step] = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Step) and cls.kind == kind
    return cls


def build_step(entry: StepCommon, index: int) -> Step:
    """The step object for a validated playbook entry."""
    return step_class(action_of(entry))(entry, index)
