"""The step vocabulary of playbooks, as the config layer validates it: a catalogue of actions.

A step in YAML is a mapping with exactly one action key plus common keys::

    - name: Add the EAGLE-3 methods
      tags: [files]
      python_insert: {path: "{{ model_file }}", class: KimiK25ForConditionalGeneration, code: ...}

Each action is declared by its step module (`deploy.steps`: the arguments model, the example,
the lifecycle and the journal records together), which registers it here with `add_action`.
This module holds what every step shares (`StepCommon`) and derives from the catalogue what
the loader needs: one entry model per action (``{action: Args}`` plus the common keys, named
``<Action>Step`` as the JSON Schema's ``$defs`` show it) and `step_entry`, the union
discriminated by which action key is present, so that pydantic reports errors under the right
key and the JSON Schema (``deploy schema``) offers completion per action. Whoever holds a
derived object (the `Playbook` model, a cached adapter) subscribes with `on_change` and is told
when an action is added or removed.

The union is what the schema and error messages describe, but not what validates a step that
is right: `validate_step` checks a step with its own action's entry model, and builds the
union's validator (~40 ms of pydantic schema building, every action's model inlined) only to
word the error of a step that its own model refuses. `Playbook` validates its steps through
`validate_step` too (`OWN_MODEL`), so a run builds only the models of the actions it uses,
each once.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from deploy.config.inventory import StrictModel, empty_list

_Strict = StrictModel


class StepCommon(_Strict):
    """Keys every step accepts besides its action."""

    name: str | None = Field(
        default=None, description="What the step is for, shown in plans and reports."
    )
    tags: list[str] = Field(
        default_factory=empty_list, description="Select with --tags / --skip-tags."
    )


COMMON_KEYS = frozenset(StepCommon.model_fields)

#: action key -> entry model, in registration order: the order of docs and error messages.
#: Filled by `add_action` (the step modules, `deploy.steps`); read it, never write it.
STEP_MODELS: dict[str, type[StepCommon]] = {}

_listeners: list[Callable[[], None]] = []


def add_action(kind: str, args: type[BaseModel]) -> type[StepCommon]:
    """Declare the action ``kind`` with its arguments model; return its entry model.

    Raises:
        ValueError: ``kind`` is not a lowercase identifier, clashes with a common key, or is
            already declared.
    """
    if not kind.isidentifier() or kind != kind.lower() or kind in COMMON_KEYS:
        raise ValueError(f"{kind!r} cannot be an action key")
    if kind in STEP_MODELS:
        raise ValueError(f"the action {kind!r} is already declared")
    name = "".join(part.capitalize() for part in kind.split("_")) + "Step"
    with warnings.catch_warnings():
        # The action ``copy`` is a field named like pydantic's deprecated ``BaseModel.copy``:
        # on purpose (steps are read with `args_of`, never with ``.copy()``).
        warnings.filterwarnings("ignore", message=f'Field name "{kind}" in "{name}" shadows')
        model: type[StepCommon] = create_model(  # type: ignore[call-overload]
            name, __base__=StepCommon, __module__=args.__module__, **{kind: (args, ...)}
        )
    STEP_MODELS[kind] = model
    _changed()
    return model


def remove_action(kind: str) -> None:
    """Forget an action (a test's throwaway step); unknown kinds are ignored."""
    if STEP_MODELS.pop(kind, None) is not None:
        _changed()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever an action is added or removed (to rebuild what it derived)."""
    _listeners.append(listener)


def _changed() -> None:
    step_entry.cache_clear()
    step_adapter.cache_clear()
    for listener in list(_listeners):
        listener()


def step_kind(raw: Any) -> str | None:
    """The action key of a raw step mapping (or model), or None when there is not exactly one."""
    if isinstance(raw, StepCommon):
        return action_of(raw)
    if not isinstance(raw, dict):
        return None
    actions = [key for key in raw if key in STEP_MODELS]
    return actions[0] if len(actions) == 1 else None


def action_of(step: StepCommon) -> str:
    """The action key of a validated step."""
    for kind, model in STEP_MODELS.items():
        if type(step) is model:
            return kind
    raise TypeError(f"not a step model: {type(step).__name__}")


def args_of(step: StepCommon) -> BaseModel:
    """The action's argument model of a validated step (e.g. its `PythonInsertArgs`)."""
    value = getattr(step, action_of(step))
    assert isinstance(value, BaseModel)
    return value


@functools.cache
def step_entry() -> Any:
    """The union of every declared action's entry model, discriminated by its action key."""
    if not STEP_MODELS:
        raise RuntimeError("no step is declared: import deploy.steps first")
    branches = [Annotated[model, Tag(kind)] for kind, model in STEP_MODELS.items()]
    union: Any = branches[0]
    for branch in branches[1:]:
        union = union | branch
    return Annotated[
        union,
        Discriminator(
            step_kind,
            custom_error_type="unknown_step",
            custom_error_message="a step needs exactly one action key: " + ", ".join(STEP_MODELS),
        ),
    ]


@functools.cache
def step_adapter() -> TypeAdapter[StepCommon]:
    """The whole step union as one validator; `validate_step` builds it only to word an error."""
    return TypeAdapter(step_entry())


def validate_step(data: Any, context: Any = None) -> StepCommon:
    """Validate one step with its own action's model only (with ``defer_build``, the models of
    actions a playbook does not use are never built). A step that model refuses, or one without
    exactly one action key, is validated again by the union, so its error is the one the
    union's discriminator gives (the tag in its location, unknown action, two actions, ...)."""
    kind = step_kind(data)
    if kind is not None:
        try:
            return STEP_MODELS[kind].model_validate(data, context=context)
        except ValidationError:
            pass
    return step_adapter().validate_python(data, context=context)


class OwnModel:
    """``Annotated`` marker for a step field: validate through `validate_step`, not the union.

    The annotation keeps the union (error locations are walked through it, `walk_loc`), and
    the JSON Schema is the union's; only the validator differs: building the union into a
    model costs every action's model, each built once more when it validates a step alone.
    """

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        def validate(value: Any, info: ValidationInfo) -> StepCommon:
            return validate_step(value, info.context)

        return core_schema.with_info_plain_validator_function(validate)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(step_adapter().core_schema)


OWN_MODEL = OwnModel()
