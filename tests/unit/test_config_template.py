"""Templating: strings rendered, variables resolved lazily, errors located and named."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from deploy.config.template import (
    Origin,
    Variables,
    _compile,
    bare_names,
    fast_parts,
    is_template,
)
from deploy.config.yamlpos import load_yaml_text
from deploy.errors import InputError

RAW_HINT = " (for literal {{ or {%, wrap the text in {% raw %}...{% endraw %})"

VARS_YAML = """\
vars:
  root: /opt/sglang
  model_file: "{{ root }}/python/kimi.py"
  tp: 8
  ports: [30000, "{{ tp }}"]
  broken: "{{ nowhere }}"
  a: "{{ b }}"
  b: "{{ c }}"
  c: "{{ a }}"
  me: "x{{ me }}"
"""


def make(extra: dict[str, Any] | None = None) -> tuple[Variables, Origin]:
    doc = load_yaml_text(VARS_YAML, "vars.yaml")
    values = dict(doc.data["vars"])
    origins = {name: Origin(doc.positions, ("vars", name)) for name in values}
    for name, value in (extra or {}).items():
        values[name] = value
        origins[name] = Origin(None, (name,), label="-e")
    return Variables(values, origins, context=" (host h1)"), Origin(doc.positions, ("vars",))


def error(fn: Any, *args: Any) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_renders_nested_structures_keeping_non_strings() -> None:
    variables, origin = make()
    value = {"path": "{{ model_file }}", "n": 3, "flag": True, "items": ["{{ tp }}", None]}
    assert variables.render(value, origin) == {
        "path": "/opt/sglang/python/kimi.py",
        "n": 3,
        "flag": True,
        "items": ["8", None],
    }


def test_rendered_values_are_strings_and_variables_keep_their_type_inside_jinja() -> None:
    variables, origin = make()
    assert variables.render("{{ tp }}", origin) == "8"
    assert variables.render("{{ tp * 2 }}", origin) == "16"
    assert variables.render("{{ ports[1] }}", origin) == "8"


def test_strings_without_template_markers_are_untouched() -> None:
    variables, origin = make()
    for text in ("echo ${#arr[@]}", "{# not a comment #}", "plain", "a } b {", ""):
        assert not is_template(text)
        assert variables.render(text, origin) == text


def test_jinja_comments_use_double_hash_so_shell_length_syntax_survives() -> None:
    variables, origin = make()
    assert variables.render("n=${#a[@]} {{ tp }}{## note ##}", origin) == "n=${#a[@]} 8"


def test_raw_blocks_keep_literal_braces_and_trailing_newline_is_kept() -> None:
    variables, origin = make()
    code = "{% raw %}f'{{x}}'{% endraw %} {{ tp }}\n"
    assert variables.render(code, origin) == "f'{{x}}' 8\n"


def test_undefined_variable_names_it_and_the_string_position() -> None:
    variables, _ = make()
    doc = load_yaml_text("steps:\n  - backup: {path: '{{ modle_file }}'}\n", "pb.yaml")
    origin = Origin(doc.positions, ("steps", 0, "backup", "path"))
    assert error(variables.render, "{{ modle_file }}", origin) == (
        "pb.yaml:2:20 steps[0].backup.path: undefined variable 'modle_file'"
        " (did you mean 'model_file'?) (host h1)"
    )


def test_undefined_variable_without_close_match_says_how_to_define_it() -> None:
    variables, origin = make()
    assert error(variables.render, "{{ zzz }}", origin) == (
        "vars.yaml:2:3 vars: undefined variable 'zzz' (define it in vars or pass -e zzz=...)"
        " (host h1)"
    )


def test_undefined_inside_a_variable_points_at_that_variable() -> None:
    variables, origin = make()
    assert error(variables.render, "{{ broken }}", origin) == (
        "vars.yaml:6:11 vars.broken: undefined variable 'nowhere'"
        " (define it in vars or pass -e nowhere=...) (host h1)"
    )


def test_undefined_attribute_is_reported() -> None:
    variables, origin = make()
    assert error(variables.render, "{{ ports.nothing }}", origin) == (
        "vars.yaml:2:3 vars: undefined value: 'list object' has no attribute 'nothing' (host h1)"
    )


def test_cycle_is_named_in_order() -> None:
    variables, origin = make()
    assert error(variables.render, "{{ a }}", origin) == (
        "vars.yaml:7:6 vars.a: variable cycle: a -> b -> c -> a (host h1)"
    )
    assert error(variables.get, "me") == (
        "vars.yaml:10:7 vars.me: variable cycle: me -> me (host h1)"
    )


def test_unused_broken_variables_are_not_errors_and_stay_as_written() -> None:
    variables, origin = make()
    assert variables.render("{{ model_file }}", origin) == "/opt/sglang/python/kimi.py"
    resolved = variables.resolved()
    assert resolved["model_file"] == "/opt/sglang/python/kimi.py"
    assert resolved["ports"] == [30000, "8"]
    assert resolved["broken"] == "{{ nowhere }}"
    assert resolved["a"] == "{{ b }}"


def test_command_line_origin_is_labelled() -> None:
    variables, origin = make({"root": "{{ missing_root }}"})
    assert error(variables.render, "{{ model_file }}", origin) == (
        "-e root: undefined variable 'missing_root' (define it in vars or pass -e"
        " missing_root=...) (host h1)"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "{{ tp",
            "template syntax error: unexpected end of template, expected 'end of print"
            " statement'." + RAW_HINT,
        ),
        (
            "{% if %}",
            "template syntax error: Expected an expression, got 'end of statement"
            " block'" + RAW_HINT,
        ),
        ('x = "{%s}" % y', "template syntax error: Encountered unknown tag 's'." + RAW_HINT),
        ("{{ 1 / 0 }}", "template error: ZeroDivisionError: division by zero"),
        (
            "{{ tp.__class__ }}",
            "template error: access to attribute '__class__' of 'int' object is unsafe.",
        ),
    ],
)
def test_template_errors_are_input_errors(source: str, expected: str) -> None:
    variables, origin = make()
    assert error(variables.render, source, origin) == f"vars.yaml:2:3 vars: {expected} (host h1)"


def test_syntax_error_in_multiline_value_names_the_line() -> None:
    variables, origin = make()
    text = error(variables.render, "line one\nline {{ two\nthree\n", origin)
    assert text == (
        "vars.yaml:2:3 vars: template syntax error: expected token 'end of print statement',"
        " got 'three'" + RAW_HINT + " (line 3 of the value) (host h1)"
    )


def test_each_variable_is_rendered_once() -> None:
    calls: list[str] = []

    class Counting(Variables):
        def render_string(self, source: str, origin: Origin) -> str:
            calls.append(source)
            return super().render_string(source, origin)

    doc = load_yaml_text(VARS_YAML, "vars.yaml")
    variables = Counting(doc.data["vars"], {})
    origin = Origin(doc.positions)
    for _ in range(3):
        variables.render("{{ model_file }}", origin)
    assert calls.count("{{ root }}/python/kimi.py") == 1


def test_mapping_keys_are_rendered_and_collisions_refused() -> None:
    variables, origin = make()
    value = {"{{ root }}": ["a"], "plain": 1}
    assert variables.render(value, origin) == {"/opt/sglang": ["a"], "plain": 1}
    doc = load_yaml_text("class_has:\n  '{{ root }}': [a]\n  /opt/sglang: [b]\n", "pb.yaml")
    where = Origin(doc.positions, ("class_has",))
    assert error(variables.render, doc.data["class_has"], where) == (
        "pb.yaml:2:3 class_has[\"{{ root }}\"]: key '{{ root }}' renders to '/opt/sglang',"
        " which is already a key (host h1)"
    )


#: A variable's own value is a template too (rendered first, by both paths): values are kept
#: plain by construction (no brace anywhere, dict keys included), not filtered afterwards.
_PLAIN_TEXT = st.text(alphabet=st.characters(blacklist_characters="{}%#"), max_size=20)
_VALUES = st.one_of(
    _PLAIN_TEXT,
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(_PLAIN_TEXT.map(lambda t: t[:5]), st.integers(), max_size=2),
)
_LITERALS = st.text(alphabet=st.sampled_from(list("ab }{#%-\n\t/é$")), max_size=12)


# Most generated sources need Jinja (a brace or `{%` in the literals): that is the boundary
# under test, so the many inputs `bare_names` declines are expected, not a health problem.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    st.lists(
        st.tuples(_LITERALS, st.sampled_from(["v1", "v2", "v3"]), st.sampled_from(["", " ", "  "])),
        min_size=1,
        max_size=4,
    ),
    _LITERALS,
    st.tuples(_VALUES, _VALUES, _VALUES),
)
def test_bare_names_render_exactly_as_jinja(
    pieces: list[tuple[str, str, str]], tail: str, values: tuple[Any, Any, Any]
) -> None:
    """The no-Jinja path for ``{{ name }}`` strings gives Jinja's own output, byte for byte."""
    source = "".join(f"{text}{{{{{pad}{name}{pad}}}}}" for text, name, pad in pieces) + tail
    names = bare_names(source)
    assume(names is not None)
    assert names is not None
    # The literals may spell a name of their own (a tail of `{{a}}`): give it a value too.
    given = dict(zip(["v1", "v2", "v3"], values, strict=True))
    given.update({name: "" for name in names[1::2] if name not in given})
    variables = Variables(given, {})
    template, _ = _compile(source)
    assert variables.render_string(source, Origin(None)) == template.render(given)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    st.lists(
        st.tuples(
            _LITERALS,
            st.sampled_from(["v1", "v2", "v3"]),
            st.sampled_from(["", " ", "  "]),
            st.sampled_from(["", "|quote", " | quote", "| quote ", " |quote"]),
        ),
        min_size=1,
        max_size=4,
    ),
    _LITERALS,
    st.tuples(_VALUES, _VALUES, _VALUES),
)
def test_quoted_names_render_exactly_as_jinja(
    pieces: list[tuple[str, str, str, str]], tail: str, values: tuple[Any, Any, Any]
) -> None:
    """``{{ name | quote }}`` without Jinja gives deploy's Jinja filter's output exactly."""
    source = (
        "".join(f"{text}{{{{{pad}{name}{filt}{pad}}}}}" for text, name, pad, filt in pieces) + tail
    )
    parts = fast_parts(source)
    assume(parts is not None)
    assert parts is not None
    given_values = dict(zip(["v1", "v2", "v3"], values, strict=True))
    given_values.update({name: "" for name in parts[1::3] if name not in given_values})
    variables = Variables(given_values, {})
    template, _ = _compile(source)
    assert variables.render_string(source, Origin(None)) == template.render(given_values)


def test_only_strings_that_need_jinja_import_it() -> None:
    code = (
        "import sys\n"
        "from deploy.config.template import Origin, Variables\n"
        "v = Variables({'a': 'x', 'n': 8}, {})\n"
        "assert v.render_string('{{ a }}/{{n}} and more', Origin(None)) == 'x/8 and more'\n"
        "assert 'jinja2' not in sys.modules\n"
        "assert v.render_string('{{ a | quote }} {{n|quote}}', Origin(None)) == 'x 8'\n"
        "assert 'jinja2' not in sys.modules\n"
        "assert v.render_string('{{ a | upper }}', Origin(None)) == 'X'\n"
        "assert 'jinja2' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
