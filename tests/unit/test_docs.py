"""Generated docs and JSON Schemas: up to date, their examples real, the schemas faithful.

The reference pages and schemas are generated from the models and docstrings
(`tools.docgen`, `deploy.schema`), so the only way they can be wrong is by not having been
regenerated, or by an example or a schema saying something the loader disagrees with. Each
of those is a test here.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy import schema
from deploy.config.load import load_inventory, load_playbook
from deploy.config.steps import STEP_MODELS
from tools import docgen

REPO = Path(__file__).resolve().parents[2]
HINT = "run python -m tools.docgen (and commit the result)"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return docgen.generated()


def _validator(document: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def _errors(document: dict[str, Any], instance: Any) -> list[str]:
    return [error.message for error in _validator(document).iter_errors(instance)]


def _yaml_blocks(relative: str) -> list[str]:
    return _YAML_BLOCK.findall((REPO / relative).read_text(encoding="utf-8"))


# --- the files in the repository are what the code says ---------------------------------------


@pytest.mark.parametrize(
    "relative", [*docgen.DOCS, "schema/hosts.schema.json", "schema/playbook.schema.json"]
)
def test_generated_file_is_up_to_date(relative: str, generated: dict[str, str]) -> None:
    path = REPO / relative
    assert path.is_file(), f"{relative} is missing: {HINT}"
    assert path.read_text(encoding="utf-8") == generated[relative], (
        f"{relative} is out of date: {HINT}"
    )


def test_docgen_check_flags_a_stale_file_and_write_fixes_it(tmp_path: Path) -> None:
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 1  # nothing written yet
    assert docgen.main(["--root", str(tmp_path)]) == 0
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "docs" / "operations.md").write_text("edited by hand\n", encoding="utf-8")
    assert docgen.stale(tmp_path) == ["docs/operations.md"]


def test_write_schemas_writes_what_docgen_checks(tmp_path: Path, generated: dict[str, str]) -> None:
    paths = schema.write_schemas(tmp_path / "out")
    assert [p.name for p in paths] == ["hosts.schema.json", "playbook.schema.json"]
    for path in paths:
        assert path.read_text(encoding="utf-8") == generated[f"schema/{path.name}"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)


# --- the examples are real --------------------------------------------------------------------


def test_every_step_is_documented_with_a_purpose_and_an_example() -> None:
    assert list(docgen.STEP_EXAMPLES) == list(STEP_MODELS), (
        "declare an example on each step class (Step.example); the registry lists them in STEP_MODELS order"
    )
    for action in STEP_MODELS:
        assert schema.step_purpose(action), f"{action}: give its step model a docstring"
        assert yaml.safe_load(docgen.STEP_EXAMPLES[action])[0].keys() & {action}


def test_every_example_in_playbooks_md_loads_and_validates(tmp_path: Path) -> None:
    blocks = _yaml_blocks("docs/playbooks.md")
    assert len(blocks) >= len(STEP_MODELS) + 2  # the frame, each step, services
    validator = _validator(schema.playbook_schema())
    for number, block in enumerate(blocks):
        text = docgen.example_playbook(block)
        path = tmp_path / f"example-{number}.yaml"
        path.write_text(text, encoding="utf-8")
        loaded = load_playbook(path)  # raises InputError with file:line on any problem
        assert loaded.playbook.steps
        problems = [e.message for e in validator.iter_errors(yaml.safe_load(text))]
        assert not problems, f"example {number} breaks the schema: {problems}\n{text}"


def test_every_example_in_inventory_md_loads_and_validates(tmp_path: Path) -> None:
    blocks = _yaml_blocks("docs/inventory.md")
    assert blocks
    for number, block in enumerate(blocks):
        path = tmp_path / f"hosts-{number}.yaml"
        path.write_text(block, encoding="utf-8")
        assert load_inventory(path).inventory.hosts
        assert _errors(schema.inventory_schema(), yaml.safe_load(block)) == []


def test_each_step_section_shows_its_own_example() -> None:
    text = (REPO / "docs" / "playbooks.md").read_text(encoding="utf-8")
    for action, example in docgen.STEP_EXAMPLES.items():
        section = text.split(f"### `{action}`\n", 1)[1].split("\n### ", 1)[0]
        assert example.rstrip() in section, action


# --- the schemas agree with the loader --------------------------------------------------------


@pytest.mark.parametrize("path", sorted((REPO / "playbooks").glob("*.yaml")), ids=lambda p: p.name)
def test_repository_playbooks_validate(path: Path) -> None:
    load_playbook(path)
    assert _errors(schema.playbook_schema(), yaml.safe_load(path.read_text())) == []


def test_repository_inventory_validates() -> None:
    path = REPO / "hosts.yaml"
    load_inventory(path)
    assert _errors(schema.inventory_schema(), yaml.safe_load(path.read_text())) == []


def _kimi() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "playbooks" / "kimi-eagle3.yaml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ((), "descripton"),
        (("steps", 1, "python_insert"), "clas"),
        (("steps", 0), "tag"),
        (("services", "sglang"), "health"),
    ],
)
def test_a_wrong_key_is_rejected(where: tuple[str | int, ...], key: str) -> None:
    data = _kimi()
    node: Any = data
    for part in where:
        node = node[part]
    node[key] = "x"
    assert _errors(schema.playbook_schema(), data), f"{key!r} at {where} was accepted"


def test_a_wrong_inventory_key_is_rejected() -> None:
    data = {"hosts": {"gpu-1": {"address": "10.0.0.1", "identity_fle": "~/.ssh/id"}}}
    assert any("identity_fle" in m for m in _errors(schema.inventory_schema(), data))


def test_a_step_needs_exactly_one_action() -> None:
    data = _kimi()
    data["steps"][0]["append"] = {"path": "/x", "text": "y"}  # backup + append
    assert _errors(schema.playbook_schema(), data)
    del data["steps"][0]["append"], data["steps"][0]["backup"]  # no action at all
    assert _errors(schema.playbook_schema(), data)


@pytest.mark.parametrize(
    ("value", "valid"),
    [(2222, True), ("{{ ssh_port }}", True), ("{% if x %}22{% endif %}", True), ("22x", False)],
)
def test_templates_are_accepted_where_the_loader_keeps_them(
    tmp_path: Path, value: object, valid: bool
) -> None:
    data = {"hosts": {"gpu-1": {"port": value}}}
    assert (not _errors(schema.inventory_schema(), data)) is valid
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    if valid:
        load_inventory(path)


def test_templates_are_refused_where_the_loader_refuses_them() -> None:
    data = _kimi()
    bad = copy.deepcopy(data)
    bad["steps"][0]["tags"] = "{{ tags }}"  # tags select steps before variables exist
    assert _errors(schema.playbook_schema(), bad)
    bad = copy.deepcopy(data)
    bad["services"]["sglang"]["env"] = "{{ env }}"  # a mapping never comes from a string
    assert _errors(schema.playbook_schema(), bad)


def test_every_templated_scalar_in_the_schema_is_one_the_loader_keeps() -> None:
    """Walk the schema: a template branch appears exactly on the fields the loader keeps."""
    document = schema.playbook_schema()
    defs = document["$defs"]
    for action in STEP_MODELS:
        model = schema.args_model(action)
        properties = defs[model.__name__]["properties"]
        for name in model.model_fields:
            key = schema.property_key(model, name)
            has_branch = schema.TEMPLATE in properties[key].get("anyOf", [])
            admits_strings = properties[key].get("type") == "string" or {"type": "string"} in (
                properties[key].get("anyOf", [])
            )
            if has_branch:
                assert schema.keeps_templates(model, name), (action, key)
            elif schema.keeps_templates(model, name):
                assert admits_strings, (action, key)


def test_steps_carry_their_purpose_for_editors() -> None:
    defs = schema.playbook_schema()["$defs"]
    for action, model in STEP_MODELS.items():
        entry = defs[model.__name__]
        assert entry["title"] == f"{action} step"
        assert entry["properties"][action]["description"] == schema.step_purpose(action)
        assert entry["required"] == [action]
