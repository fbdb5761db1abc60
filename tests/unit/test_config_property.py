"""Property: any YAML-ish file either loads or fails with a one-line InputError, nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.config.load import load_inventory, load_playbook, resolve
from deploy.config.steps import STEP_MODELS
from deploy.errors import InputError

KEYS = [
    "name",
    "hosts",
    "steps",
    "vars",
    "groups",
    "description",
    "tags",
    *STEP_MODELS,
    "path",
    "class",
    "code",
    "where",
    "replace",
    "diff",
    "diff_file",
    "text",
    "lines",
    "last_line",
    "run",
    "timeout",
    "expect_exit",
    "after",
    "before",
    "compiles",
    "class_has",
    "address",
    "port",
    "user",
    "identity_file",
    "connect_timeout",
    "accept_new_host_keys",
    "gpu-1",
    "gpus",
    "all",
    "inventory_hostname",
]
TEMPLATES = [
    "{{ x }}",
    "{{ inventory_hostname }}",
    "{{ playbook_dir }}/a",
    "{% if %}",
    "{{ 1/0 }}",
    "{{",
    "}}",
    "{{ x.__class__ }}",
    "gpu-*",
    "!gpus",
    "all",
    "/opt/a.py",
    "22",
    "true",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(TEMPLATES),
    st.text(max_size=12),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(0, 3), st.booleans())
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)
#: The keys each file and verify step requires (tests/faults/test_generated_config.py too).
REQUIRED = {
    "backup": ["path"],
    "python_insert": ["path", "class", "code"],
    "patch": ["path", "diff"],
    "append": ["path", "text"],
    "verify_python": ["path"],
    "verify_tail": ["path", "last_line"],
    "verify_command": ["run"],
}
OPTIONAL = ["timeout", "expect_exit", "where", "replace", "diff_file", "compiles", "bogus"]
strings = st.one_of(st.sampled_from(TEMPLATES), st.text(max_size=6))


@st.composite
def steps(draw: st.DrawFn) -> Any:
    """Mostly well-formed steps whose values are templates, with the odd wrong key or value."""
    action = draw(st.sampled_from([*REQUIRED, "frob"]))
    args = draw(
        st.fixed_dictionaries(
            {key: strings for key in REQUIRED.get(action, [])},
            optional={key: st.one_of(strings, scalars) for key in OPTIONAL},
        )
    )
    step: dict[str, Any] = {action: args}
    if draw(st.booleans()):
        step["tags"] = draw(st.lists(st.sampled_from(["files", "always", "never", "{{ x }}"])))
    if draw(st.booleans()):
        step["name"] = draw(strings)
    return step


playbook_like = st.fixed_dictionaries(
    {
        "name": strings,
        "hosts": st.sampled_from(["all", "gpus", "gpu-*", "!gpu-1", "gpu-9", "{{ x }}"]),
        "steps": st.lists(steps(), min_size=1, max_size=4),
    },
    optional={"vars": st.dictionaries(st.sampled_from(["x", "y", "port", "bad-name"]), scalars)},
)
top_level = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), documents, max_size=6),
    playbook_like,
    documents,
)


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    text = yaml.safe_dump(draw(top_level), sort_keys=False, allow_unicode=True)
    if draw(st.booleans()):
        return text
    position = draw(st.integers(0, len(text)))
    noise = draw(st.sampled_from(["", ":", "- ", "{", "]", "\t", "&a ", "*a", "\n  ", '"', "\x07"]))
    cut = draw(st.integers(0, 3))
    return text[:position] + noise + text[position + cut :]


INVENTORY = "hosts:\n  gpu-1: {port: '{{ port }}'}\n  gpu-2: {}\ngroups:\n  gpus: [gpu-1, gpu-2]\n"
PLAYBOOK = "name: p\nhosts: all\nsteps:\n  - backup: {path: '/{{ inventory_hostname }}'}\n"


def assert_one_line(error: InputError) -> None:
    text = str(error)
    assert text and "\n" not in text and "\r" not in text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("property")
    (path / "fixed-hosts.yaml").write_text(INVENTORY + "vars: {port: 2222}\n")
    (path / "fixed-pb.yaml").write_text(PLAYBOOK)
    return path


def attempt(action: Any) -> None:
    try:
        action()
    except InputError as error:
        assert_one_line(error)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=yaml_texts())
def test_any_document_loads_or_raises_one_line_input_error(workdir: Path, text: str) -> None:
    path = workdir / "doc.yaml"
    path.write_text(text, encoding="utf-8")
    fixed_inventory = load_inventory(workdir / "fixed-hosts.yaml")
    fixed_playbook = load_playbook(workdir / "fixed-pb.yaml")

    def as_playbook() -> None:
        playbook = load_playbook(path)
        resolve(fixed_inventory, playbook, extra_vars={"x": "1"})

    def as_inventory() -> None:
        inventory = load_inventory(path)
        resolve(inventory, fixed_playbook)

    attempt(as_playbook)
    attempt(as_inventory)
