"""YAML loading with positions: every key and value located, every bad file one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.config import yamlpos
from deploy.config.yamlpos import format_path, load_yaml, load_yaml_text
from deploy.errors import InputError


def error_of(text: str, file: str = "f.yaml") -> str:
    with pytest.raises(InputError) as info:
        load_yaml_text(text, file)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_positions_of_keys_and_values_are_one_based() -> None:
    doc = load_yaml_text(
        "name: x\nsteps:\n  - python_insert:\n      class: Foo\n      where: {after: bar}\n",
        "pb.yaml",
    )
    pos = doc.positions
    assert pos.values[("name",)] == (1, 7)
    assert pos.keys[("name",)] == (1, 1)
    assert pos.values[("steps", 0)] == (3, 5)
    assert pos.keys[("steps", 0, "python_insert", "class")] == (4, 7)
    assert pos.values[("steps", 0, "python_insert", "class")] == (4, 14)
    assert pos.values[("steps", 0, "python_insert", "where", "after")] == (5, 22)


def test_locate_falls_back_to_nearest_ancestor_and_names_the_field() -> None:
    doc = load_yaml_text("steps:\n  - backup:\n      x: 1\n", "pb.yaml")
    where = doc.positions.locate(("steps", 0, "backup", "path"))
    assert (where.line, where.column) == (3, 7)  # the mapping that lacks 'path'
    assert where.field == "steps[0].backup.path"
    assert str(where) == "pb.yaml:3:7"


def test_locate_prefers_key_when_asked() -> None:
    doc = load_yaml_text("hosts:\n  a:\n    bogus: 1\n", "h.yaml")
    assert doc.positions.nearest(("hosts", "a", "bogus"), prefer_key=True) == (3, 5)
    assert doc.positions.nearest(("hosts", "a", "bogus")) == (3, 12)


def test_non_string_keys_are_kept_like_the_data() -> None:
    doc = load_yaml_text("1: one\n'2': two\n", "f.yaml")
    assert doc.data == {1: "one", "2": "two"}
    assert doc.positions.values[(1,)] == (1, 4)
    assert doc.positions.values[("2",)] == (2, 6)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: [1\nb: 2\n",
            "f.yaml:2:2: YAML syntax error: while parsing a flow sequence (started on line 1):"
            " expected ',' or ']', but got ':'",
        ),
        ("a: b: c\n", "f.yaml:1:5: YAML syntax error: mapping values are not allowed here"),
        (
            'a: "x\n',
            "f.yaml:2:1: YAML syntax error: while scanning a quoted scalar (started on line 1):"
            " found unexpected end of stream",
        ),
        ("a: *nope\n", "f.yaml:1:4: YAML syntax error: found undefined alias 'nope'"),
        (
            "a: !!python/object:os.system x\n",
            "f.yaml:1:4: YAML syntax error: could not determine a constructor for the tag"
            " 'tag:yaml.org,2002:python/object:os.system'",
        ),
        (
            "a: 1\n---\nb: 2\n",
            "f.yaml:2:1: YAML syntax error: expected a single document in the stream"
            " (started on line 1): but found another document",
        ),
    ],
)
def test_syntax_errors_have_line_column_and_problem(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_unacceptable_character_is_located() -> None:
    assert error_of("a: 1\nb: \x07\n") == (
        "f.yaml:2:4: character #x0007 is not allowed in YAML (special characters are not allowed)"
    )


def test_duplicate_key_is_an_error_naming_both_lines() -> None:
    text = "hosts:\n  a: {}\n  b:\n    port: 22\n    port: 2222\n"
    assert error_of(text) == "f.yaml:5:5: duplicate key 'port' (first defined on line 4)"


def test_merge_keys_may_be_overridden() -> None:
    doc = load_yaml_text("base: &b {port: 22, user: x}\nhost:\n  <<: *b\n  port: 2222\n", "f")
    assert doc.data["host"] == {"port": 2222, "user": "x"}
    assert doc.positions.values[("host", "port")] == (4, 9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "f.yaml: the file is empty (expected a YAML mapping)"),
        ("# nothing here\n", "f.yaml: the file is empty (expected a YAML mapping)"),
        ("- a\n- b\n", "f.yaml:1:1: expected a mapping at the top level, got a list"),
        ("just text\n", "f.yaml:1:1: expected a mapping at the top level, got a string"),
        ("null\n", "f.yaml:1:1: expected a mapping at the top level, got nothing (null)"),
    ],
)
def test_top_level_must_be_a_mapping(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_recursive_alias_is_refused() -> None:
    assert error_of("a: &x [1, *x]\n") == (
        "f.yaml:1:4: an alias refers to a node that contains it (recursive data is not allowed)"
    )


def test_alias_bomb_is_refused() -> None:
    lines = ['l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 8):
        refs = ",".join([f"*l{i - 1}"] * 10)
        lines.append(f"l{i}: &l{i} [{refs}]")
    message = error_of("\n".join(lines) + "\n")
    assert message == "f.yaml:1:1: the document expands to more than 1000000 nodes through aliases"


def test_deep_nesting_is_an_input_error() -> None:
    assert error_of("a: " + "[" * 3000 + "]" * 3000 + "\n") == (
        "f.yaml: the document is nested too deeply"
    )


def test_load_yaml_reports_bad_utf8_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(InputError) as info:
        load_yaml(bad)
    assert str(info.value) == f"{bad}:2:4: the file is not valid UTF-8"
    with pytest.raises(InputError, match="cannot read the file"):
        load_yaml(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("steps", 0, "python_insert", "class"), "steps[0].python_insert.class"),
        (("hosts", "gpu-1", "port"), "hosts.gpu-1.port"),
        (("hosts", "10.0.0.1"), 'hosts["10.0.0.1"]'),
        (("vars", "a\nb"), 'vars["a\\nb"]'),
        ((), ""),
    ],
)
def test_format_path(path: tuple[str | int, ...], text: str) -> None:
    assert format_path(path) == text


# libyaml's parser reads first where it is present (speed); these show it changes nothing.

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [
    "a: 1\r\nb: [x, {y: 2}]\r\n",
    'm: {a: ü中😀, b: 1}\nl: ["é😀", x, {k: v}]\nü: {ä: [1, 2]}\n',  # columns in characters
    's: \'quoted ü 中文 😀\'\nt: "esc\\t\\u00e9"\nu: "ü: x"\n',
    "base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  y: 3\nlist: [*b, *b]\n",
    "text: |\n  line one\n    indented\n\nfolded: >-\n  a\n  b\n? complex\n: value\n",
    "x:\n  - - - nested: compact\n      - y\n  - z\n",
    "top:\n  # a comment\n  k: v  # trailing\n1: int key\n'1': str key\n",
    "pb:\n  steps:\n    - python_insert: {path: /x, class: 'K', code: \"def f(self):\\n  pass\"}\n",
]


def _both(text: str) -> tuple[yamlpos.YamlDocument, yamlpos.YamlDocument]:
    return yamlpos._load(yamlpos._CLoader, text, "f"), yamlpos._load(yamlpos._Loader, text, "f")


@pytest.mark.skipif(yamlpos._CSafeLoader is None, reason="PyYAML without libyaml")
@pytest.mark.parametrize(
    "name",
    sorted(
        str(p.relative_to(REPO))
        for pattern in ("*.yaml", "*.yml")
        for p in REPO.rglob(pattern)
        if not any(part.startswith(".") or part == "node_modules" for part in p.parts)
    ),
)
def test_libyaml_gives_the_same_data_and_positions_for_every_repository_file(name: str) -> None:
    text = (REPO / name).read_text(encoding="utf-8-sig")
    try:
        fast, pure = _both(text)
    except InputError:  # a deliberately bad file: errors are always the pure loader's
        return
    assert fast.data == pure.data
    assert fast.positions.values == pure.positions.values
    assert fast.positions.keys == pure.positions.keys


@pytest.mark.skipif(yamlpos._CSafeLoader is None, reason="PyYAML without libyaml")
@pytest.mark.parametrize("text", SAMPLES)
def test_libyaml_gives_the_same_data_and_positions_for_tricky_text(text: str) -> None:
    fast, pure = _both(text)
    assert fast.data == pure.data
    assert fast.positions.values == pure.positions.values
    assert fast.positions.keys == pure.positions.keys


@pytest.mark.skipif(yamlpos._CSafeLoader is None, reason="PyYAML without libyaml")
def test_the_shipped_playbook_takes_the_fast_parser_and_deep_nesting_does_not() -> None:
    playbook = (REPO / "deploy/playbooks/kimi-eagle3.yaml").read_text(encoding="utf-8")
    assert yamlpos._c_parser_fits(playbook)
    # libyaml's composer recurses in C without limit: a deep document would crash the process.
    assert not yamlpos._c_parser_fits("a: " + "[" * 3000 + "]" * 3000 + "\n")
    assert not yamlpos._c_parser_fits("a: '\x07'\n")  # a character YAML forbids


@pytest.mark.parametrize(
    "text",
    [
        "k:\tv\n",
        "k: v\t# c\n",
        "a: [b?c]\n",
        "a: {b: c?d}\n",
        "a\ufeff: 1\n",
        "a: {x: , y: 1}\n",
        "a: [x: ]\n",
        "a: |#\n  x\n",
    ],
)
def test_what_libyaml_alone_accepts_is_refused_or_read_as_the_pure_loader_does(text: str) -> None:
    # libyaml takes a tab as space and "?" inside a flow scalar; the pure loader refuses both.
    pure: Any
    try:
        pure = yamlpos._load(yamlpos._Loader, text, "f").data
    except InputError as exc:
        pure = str(exc)
    try:
        loaded = load_yaml_text(text, "f")
        assert loaded.data == pure
        assert loaded.positions.values == yamlpos._load(yamlpos._Loader, text, "f").positions.values
    except InputError as exc:
        assert str(exc) == pure


def test_errors_are_worded_by_the_pure_python_loader_even_when_libyaml_reads_first() -> None:
    # libyaml says "found undefined alias" without the alias; the pure loader names it.
    assert error_of("a: *nope\n") == "f.yaml:1:4: YAML syntax error: found undefined alias 'nope'"
    assert error_of("a: 1\na: 2\n") == "f.yaml:2:1: duplicate key 'a' (first defined on line 1)"
