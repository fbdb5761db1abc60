"""`deploy.checks.parsing.parse`: one tree per distinct source, whatever the file's name."""

from __future__ import annotations

import pytest

from deploy.checks.parsing import parse


def test_same_bytes_at_different_paths_share_one_tree() -> None:
    # A fleet installs the same kimi_k25.py under a different path on each host.
    source = b"class A:\n    def f(self):\n        return 1\n"
    first = parse(source, filename="/srv/venv-a/kimi_k25.py")
    assert parse(source, filename="/srv/venv-b/kimi_k25.py") is first
    assert parse(source.decode(), filename="/x.py") is not first  # str and bytes are distinct keys


def test_a_syntax_error_names_each_callers_file() -> None:
    source = b"def broken(:\n"
    for name in ("/host-a/m.py", "/host-b/m.py"):
        with pytest.raises(SyntaxError) as caught:
            parse(source, filename=name)
        assert caught.value.filename == name
        assert caught.value.lineno == 1
