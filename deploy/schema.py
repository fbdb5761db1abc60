"""JSON Schemas of ``hosts.yaml`` and of playbooks, generated from the config models.

An editor that knows the schema completes keys, shows each key's meaning on hover and flags a
typo as it is typed, long before ``deploy validate``. The schemas are generated, never written
by hand, so they say exactly what the pydantic models accept; ``deploy schema`` writes them
and ``python -m tools.docgen`` refreshes the copies in ``schema/`` (a test keeps those equal
to what this module produces). Point an editor at them with a first line such as::

    # yaml-language-server: $schema=../schema/playbook.schema.json

(the path is relative to the YAML file). ``model_json_schema()`` alone would be wrong in two
ways, both corrected here:

- Templates. Files are validated as written before any variable is known, and that pass keeps
  a ``{{ ... }}`` string in any scalar field (`deploy.config.inventory.kept_as_written`):
  ``port: "{{ sglang_port }}"`` is valid and checked as a port only once rendered per host.
  The raw schema says ``integer`` and an editor would flag every such line, so wherever the
  models keep a template and the field is not already a plain string, the field also admits
  a string containing ``{{`` or ``{%``. Where the models refuse templates (``tags``, lists,
  mappings, the playbook's ``serial``) the schema refuses them too.
- Steps. Each step is one branch of a ``oneOf``, told apart by its action key; every branch
  and action key carries the step's purpose, so hovering over ``python_insert:`` explains it.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from deploy.config.inventory import AS_WRITTEN, Inventory, kept_as_written
from deploy.config.playbook import Playbook
from deploy.config.steps import STEP_MODELS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
INVENTORY_FILE = "hosts.schema.json"
PLAYBOOK_FILE = "playbook.schema.json"

#: What the as-written pass keeps unvalidated (`kept_as_written`): any ``{{`` or ``{%``.
TEMPLATE_PATTERN = r"\{\{|\{%"
TEMPLATE: dict[str, Any] = {
    "type": "string",
    "pattern": TEMPLATE_PATTERN,
    "description": "A {{ template }}: checked as this field once rendered for each host.",
}

#: Purposes of steps whose argument model is shared (restart, stop and start all take
#: `ServiceArgs`, whose docstring says what the arguments are, not what the step does).
#: Used only while the step model itself has no docstring, which would take precedence.
SHARED_ARGS_PURPOSES: dict[str, str] = {
    "restart": "Stop the service and start it again as `services:` defines it.",
    "stop": (
        "Stop the service: its whole process group, orphaned children, the port and, when "
        "listed, its GPUs. No change when it is not running."
    ),
    "start": "Start the service as `services:` defines it. No change when it already runs.",
}

#: Keys that describe a schema rather than constrain it: they stay outside an added ``anyOf``.
_ANNOTATIONS = ("title", "description", "default", "examples", "deprecated")
_DOUBLE_BACKTICKS = re.compile(r"``(.+?)``", re.DOTALL)


def _markdown(text: str) -> str:
    """Docstring markup as Markdown: ``x`` becomes `x` (editors render hovers as Markdown)."""
    return _DOUBLE_BACKTICKS.sub(r"`\1`", inspect.cleandoc(text))


def first_paragraph(text: str | None) -> str:
    """The summary of a docstring: its first paragraph, as one Markdown line."""
    if not text:
        return ""
    return " ".join(_markdown(text).split("\n\n")[0].split())


def step_purpose(action: str) -> str:
    """What the step ``action`` is for, in one line, from the models' docstrings.

    The step model's own docstring wins; then its argument model's, unless other actions
    share that model (its docstring then describes arguments, not a step); then
    `SHARED_ARGS_PURPOSES`.
    """
    model = STEP_MODELS[action]
    if model.__doc__:
        return first_paragraph(model.__doc__)
    args = args_model(action)
    sharing = [a for a in STEP_MODELS if args_model(a) is args]
    if len(sharing) == 1:
        return first_paragraph(args.__doc__)
    return SHARED_ARGS_PURPOSES.get(action, "")


def args_model(action: str) -> type[BaseModel]:
    """The argument model of a step, e.g. `PythonInsertArgs` for ``python_insert``."""
    annotation = STEP_MODELS[action].model_fields[action].annotation
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return annotation


class _AsWrittenInfo:
    """The two attributes of a `ValidationInfo` that `kept_as_written` reads, for one field.

    Asking `kept_as_written` itself, rather than re-deriving its rule, keeps the schema's idea
    of "where may a template go" identical to the loader's.
    """

    def __init__(self, field_name: str) -> None:
        self.context = {AS_WRITTEN: True}
        self.field_name = field_name


def keeps_templates(model: type[BaseModel], field_name: str) -> bool:
    """Whether the as-written pass keeps a template in ``model.field_name`` unvalidated.

    Only models with the template-keeping validator (`deploy.config.inventory._Strict` and
    `deploy.config.steps._Strict`) do; `Playbook` itself does not.
    """
    if "_keep_templates" not in model.__pydantic_decorators__.field_validators:
        return False
    info = cast(ValidationInfo, _AsWrittenInfo(field_name))
    return kept_as_written(model, "{{ x }}", info)


def _is_plain_string(schema: dict[str, Any]) -> bool:
    """A schema any string satisfies (so a template already passes it)."""
    return schema.get("type") == "string" and set(schema) <= {"type", *_ANNOTATIONS}


def _admit_template(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or a template: annotations stay on top, constraints move into ``anyOf``."""
    branches: list[dict[str, Any]] = schema.get("anyOf") or [
        {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    ]
    if any(_is_plain_string(branch) for branch in branches):
        return schema
    kept = {k: v for k, v in schema.items() if k in _ANNOTATIONS}
    return {**kept, "anyOf": [*branches, TEMPLATE]}


def property_key(model: type[BaseModel], name: str) -> str:
    """The key a field is written under in YAML (``class`` for ``class_``)."""
    field = model.model_fields[name]
    alias = field.validation_alias if isinstance(field.validation_alias, str) else field.alias
    return alias or name


class _Generator(GenerateJsonSchema):
    """pydantic's generator, plus templates in scalar fields and a purpose on every step."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        model = schema["cls"]
        properties = json_schema.get("properties", {})
        for name in model.model_fields:
            key = property_key(model, name)
            if key in properties and keeps_templates(model, name):
                properties[key] = _admit_template(properties[key])
        action = next((a for a, m in STEP_MODELS.items() if m is model), None)
        if action is not None:
            purpose = step_purpose(action)
            json_schema["title"] = f"{action} step"
            json_schema["description"] = purpose
            properties[action] = {**properties[action], "description": purpose}
        return json_schema


def _clean_descriptions(node: Any) -> Any:
    """Every ``description`` as Markdown (docstrings use reST's double backticks)."""
    if isinstance(node, dict):
        return {
            key: _markdown(value)
            if key == "description" and isinstance(value, str)
            else _clean_descriptions(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_clean_descriptions(item) for item in node]
    return node


def _schema(model: type[BaseModel], schema_id: str, title: str) -> dict[str, Any]:
    body = model.model_json_schema(schema_generator=_Generator)
    head = {"$schema": DRAFT, "$id": schema_id, "title": title}
    return cast(dict[str, Any], _clean_descriptions({**head, **body, "title": title}))


def inventory_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an inventory file such as ``hosts.yaml``."""
    return _schema(Inventory, "urn:deploy:schema:hosts", "deploy inventory (hosts.yaml)")


def playbook_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a playbook file (``playbooks/NAME.yaml``)."""
    return _schema(Playbook, "urn:deploy:schema:playbook", "deploy playbook")


def render(schema: dict[str, Any]) -> str:
    """A schema as the file's text: stable key order, two-space indent, final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_files() -> dict[str, str]:
    """File name -> content of every schema ``deploy schema`` writes."""
    return {
        INVENTORY_FILE: render(inventory_schema()),
        PLAYBOOK_FILE: render(playbook_schema()),
    }


def write_schemas(directory: Path) -> list[Path]:
    """Write ``hosts.schema.json`` and ``playbook.schema.json`` into ``directory``.

    The directory is created if needed; files are replaced whole (written beside, then
    renamed), so an editor watching them never reads half a schema.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_files().items():
        path = directory / name
        temporary = path.with_name(f".{name}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        written.append(path)
    return written
