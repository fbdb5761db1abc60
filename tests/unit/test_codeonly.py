"""`deploy.remote.codeonly.stripped`: the host programs' code without their prose, never
different code. Adversarial inputs from the attack review of the change (issue 17)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from deploy.remote.codeonly import stripped


def _run(source: str) -> str:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", source], capture_output=True, text=True, check=True
    ).stdout


def test_prose_goes_and_strings_and_shared_lines_stay() -> None:
    source = (
        '"""Module doc."""\n'
        "import os  # why\n"
        "\n"
        "SCRIPT = '''line one\n"
        "# not a comment\n"
        "\n"
        "'''\n"
        "def only_doc():\n"
        '    """Nothing else."""\n'
        "def shared(): return 'x'  # trailing\n"
        "X = 1; 'kept: shares its line'\n"
        "if os:\n"
        "    # a comment line\n"
        "    '''a bare string'''\n"
        "else:\n"
        "    y = '#' + \"# not either\"\n"
    )
    assert stripped(source) == (
        "import os\n"
        "SCRIPT = '''line one\n"
        "# not a comment\n"
        "\n"
        "'''\n"
        "def only_doc():\n"
        "    pass\n"
        "def shared(): return 'x'\n"
        "X = 1; 'kept: shares its line'\n"
        "if os:\n"
        "    pass\n"
        "else:\n"
        "    y = '#' + \"# not either\"\n"
    )


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x85"])
def test_a_line_separator_python_does_not_count_cannot_shift_the_lines(separator: str) -> None:
    """`str.splitlines` breaks at these, the tokenizer does not: a comment hiding code after
    one must stay a comment."""
    source = f"import os\n# see the docs{separator}print('PWNED')\nprint('ok')\n"
    assert _run(source) == "ok\n"
    assert _run(stripped(source)) == "ok\n"


def test_a_form_feed_line_is_fine() -> None:
    source = "x = 1\n\x0c\n# page two\nprint(x)\n"
    assert _run(stripped(source)) == "1\n"


def test_column_offsets_are_bytes_for_non_ascii_strings() -> None:
    """``ast`` counts UTF-8 bytes: code after a non-ASCII bare string on its line stays."""
    source = "x = 0\n'ééééééé'; x = 1\nprint(x)\ndef f():\n    'éééééé';print(2)\nf()\n"
    assert _run(stripped(source)) == "1\n2\n"


def test_a_line_after_a_backslash_continuation_is_kept() -> None:
    source = "x = 1 \\\n    + 2\nprint(x)\nif 0: y = 1; \\\n'doc'\nprint('after')\n"
    assert _run(stripped(source)) == _run(source)


def test_a_kept_string_never_becomes_a_docstring() -> None:
    """A block whose bare strings cannot all go keeps all of them, so ``__doc__`` is the same."""
    source = "def f():\n    'doc'\n    'x'; y = 1\n    return y\nprint(f.__doc__, f())\n"
    assert _run(stripped(source)) == "doc 1\n"


def test_what_does_not_parse_is_returned_as_it_is() -> None:
    assert stripped("def (:\n  # oops\n") == "def (:\n  # oops\n"


def test_the_result_is_checked_against_the_tree() -> None:
    """Every output parses to the input's tree without the removed strings (the module's
    own check): a sample of shapes, each compiled for the hosts' oldest Python."""
    source = (
        "try:\n    'a'\nexcept Exception:\n    'b'\nelse:\n    'c'\nfinally:\n    'd'\n"
        "for i in []:\n    'e'\nelse:\n    pass  # type: ignore\n"
        "while False:\n    'f'\nwith open('/dev/null') as h:\n    'g'\n"
        "class C:\n    'doc'\n    def m(self):\n        'doc'\n"
        'z = f"{1 + 1}#not a comment"\nprint(z)\n'
    )
    out = stripped(source)
    ast.parse(out, feature_version=(3, 8))
    assert "'a'" not in out and "'doc'" not in out and "# type" not in out
    assert _run(out) == "2#not a comment\n"
