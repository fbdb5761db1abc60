"""YAML and templating have size limits: a bomb is one line, exit 2, never a MemoryError.

Issue 14: an alias bomb of a 1 MB templated string ended in a MemoryError traceback, exit 1.
Three shapes are covered: aliases multiplying a large string (the YAML itself expands),
variables that double each other (the templating expands), and a Jinja expression that
multiplies (``'x' * 10**12``). The CLI case runs under an address-space cap so that a
regression fails with MemoryError instead of eating the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.config.template import MAX_RENDERED_CHARS, Origin, Variables
from deploy.config.yamlpos import MAX_EXPANDED_CHARS, load_yaml_text
from deploy.errors import InputError

BIG = "x" * (1024 * 1024)


def _error(text: str) -> str:
    with pytest.raises(InputError) as info:
        load_yaml_text(text, "f.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_large_string_aliased_many_times_is_refused() -> None:
    refs = ", ".join(["*big"] * 100)  # 100 MiB of text from a 1 MiB file
    message = _error(f"big: &big {BIG}\nmany: [{refs}]\n")
    assert message == "f.yaml:1:1: the document expands to more than 16 MiB of text through aliases"


def test_text_below_the_limit_loads_and_aliases_are_shared() -> None:
    refs = ", ".join(["*big"] * 10)  # 11 MiB: allowed
    doc = load_yaml_text(f"big: &big {BIG}\nmany: [{refs}]\n", "f.yaml")
    assert len(doc.data["many"]) == 10 and doc.data["many"][0] is doc.data["big"]
    assert 11 * len(BIG) < MAX_EXPANDED_CHARS


def _variables(values: dict[str, str]) -> Variables:
    origins = {name: Origin(None, ("vars", name), label="f.yaml") for name in values}
    return Variables(values, origins)


def test_variables_doubling_each_other_are_refused_by_size() -> None:
    values = {"v0": BIG} | {f"v{i}": f"{{{{ v{i - 1} }}}}{{{{ v{i - 1} }}}}" for i in range(1, 40)}
    variables = _variables(values)
    with pytest.raises(InputError) as info:
        variables.get("v39")
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith("the value would be larger than 16 MiB once rendered")
    assert message.startswith("f.yaml")


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x' * 10**12 }}",
        "{{ big * 100000 }}",
        "{{ 100000 * big }}",
        "{{ [1] * 10**9 }}",
        "{{ 9 ** 99999999 }}",
        "{{ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big }}",
    ],
)
def test_jinja_expressions_that_explode_are_refused(source: str) -> None:
    variables = _variables({"big": BIG, "t": source})
    with pytest.raises(InputError) as info:
        variables.get("t")
    assert str(info.value).endswith("the value would be larger than 16 MiB once rendered")


def test_small_multiplication_still_works() -> None:
    assert _variables({"t": "{{ '-' * 3 }}{{ 2 ** 10 }}"}).get("t") == "---1024"
    assert MAX_RENDERED_CHARS == 16 * 1024 * 1024


def _capped() -> None:  # pragma: no cover - runs in the child
    cap = 1024 * 1024 * 1024  # 1 GiB: a bomb would hit it, a normal load is far below
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


@pytest.mark.parametrize("shape", ["aliases", "variables"])
def test_cli_reports_a_bomb_as_one_line_exit_2(tmp_path: Path, shape: str) -> None:
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "hosts.yaml").write_text("hosts:\n  h1:\n    address: 127.0.0.1\n")
    if shape == "aliases":
        refs = ", ".join(["*big"] * 2000)
        text = f"name: bomb\nhosts: all\nvars:\n  big: &big {BIG}\n  many: [{refs}]\nsteps: []\n"
    else:
        doubling = "".join(
            f'  v{i}: "{{{{ v{i - 1} }}}}{{{{ v{i - 1} }}}}"\n' for i in range(1, 30)
        )
        text = (
            f"name: bomb\nhosts: all\nvars:\n  v0: {BIG}\n{doubling}"
            "steps:\n  - verify_command:\n      run: echo {{ v29 }}\n"
        )
    book = tmp_path / "playbooks" / "bomb.yaml"
    book.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "apply", "bomb", "--check", "-i", "hosts.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_capped,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "bomb.yaml" in lines[0] and "MiB" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
