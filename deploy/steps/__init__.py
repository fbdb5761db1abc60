"""Steps: one module per action, all with the same lifecycle (see `deploy.steps.base`).

This is the registry. Each module in `STEP_MODULES` declares its step classes — arguments
model, example, plan/apply/verify, the files it reads, its journal records and their undo —
and registers them with `register`. Everything else is derived from the registered classes:
the config union playbooks are validated with (`deploy.config.steps`), the reference docs and
JSON Schema (`tools.docgen`, `deploy.schema`), the examples, the undo dispatch of the
rollback (`undo_for`). A new step type is one new module listed here (or, outside the
package, any module that calls `register`).

Importing the step modules is cheap on purpose: what a step needs of the remote layer and of
the service machinery (SSH-tunnelled HTTP, nvidia-smi parsing) is imported when it runs, so
``deploy validate`` and a file-only run never load it.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

from deploy.config.steps import STEP_MODELS, StepCommon, action_of, add_action, remove_action
from deploy.statedir import records as _records
from deploy.steps.base import RecordUndo, Step

#: The built-in step modules, in the order their actions are shown in docs and messages.
STEP_MODULES = (
    "deploy.steps.backup",
    "deploy.steps.python_insert",
    "deploy.steps.patch",
    "deploy.steps.append",
    "deploy.steps.lineinfile",
    "deploy.steps.copy",
    "deploy.steps.template",
    "deploy.steps.verify_python",
    "deploy.steps.verify_tail",
    "deploy.steps.verify_command",
    "deploy.steps.service",  # restart, stop, start
    "deploy.steps.wait_healthy",
    "deploy.steps.smoke",
    "deploy.steps.gate_throughput",
)

S = TypeVar("S", bound=type[Step[Any]])

_CLASSES: dict[str, type[Step[Any]]] = {}


def register(cls: S) -> S:
    """Make ``cls`` a step playbooks can name: its action is accepted by the loader, listed
    in the docs and the schema, run by the engine and, through its records, undone.

    Usable as a class decorator. Raises `ValueError` when the class lacks a ``kind``, an
    arguments model (``Step[Args]``) or an ``example``, or when its action is taken.
    """
    if not cls.kind or cls.args_model is None or not cls.example.strip():
        raise ValueError(
            f"{cls.__name__}: a step declares kind, its arguments (Step[Args]) and an example"
        )
    add_action(cls.kind, cls.args_model)
    _CLASSES[cls.kind] = cls
    for record in cls.records:
        _records.register(record)
    return cls


def unregister(kind: str) -> None:
    """Undo `register` (a test's throwaway step); the records it registered are forgotten too."""
    cls = _CLASSES.pop(kind, None)
    if cls is None:
        return
    remove_action(kind)
    for record in cls.records:
        if not any(record in other.records for other in _CLASSES.values()):
            _records.unregister(record)


def step_class(kind: str) -> type[Step[Any]]:
    """The `Step` subclass for an action key."""
    return _CLASSES[kind]


def step_classes() -> dict[str, type[Step[Any]]]:
    """Every registered step class by action key, in `STEP_MODELS` order."""
    return {kind: _CLASSES[kind] for kind in STEP_MODELS}


def build_step(entry: StepCommon, index: int) -> Step[Any]:
    """The step object for a validated playbook entry."""
    return step_class(action_of(entry))(entry, index)


def examples() -> dict[str, str]:
    """Each action's documented example (YAML steps), in `STEP_MODELS` order."""
    return {kind: cls.example for kind, cls in step_classes().items()}


def undo_for(op: str) -> type[RecordUndo] | None:
    """The handler that undoes intent records of ``op`` (None: no registered step writes it)."""
    for cls in _CLASSES.values():
        if any(r.EVENT == "intent" and op == r.OP for r in cls.records):
            for handler in cls.undo_handlers():
                if handler.op == op:
                    return handler
    return None


for _module in STEP_MODULES:
    importlib.import_module(_module)
