"""deploy.edits.flagtext: flags written as one string (``-e set_flags=...``), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.edits.flagtext import parse_remove, parse_set


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("--enable-metrics", {"--enable-metrics": True}),
        ("--mem-fraction-static 0.88", {"--mem-fraction-static": "0.88"}),
        ("--a=1 --b", {"--a": "1", "--b": True}),
        ("--cuda-graph-bs 1 2 4", {"--cuda-graph-bs": ["1", "2", "4"]}),
        ("--random-seed -1", {"--random-seed": "-1"}),
        ("--served-model-name 'my model'", {"--served-model-name": "my model"}),
    ],
)
def test_parse_set(text: str, expected: dict[str, Any]) -> None:
    assert parse_set(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.88 --x", "is not a flag"),
        ("--a 1 --a 2", "given twice"),
        ("--a 'open", "cannot read"),
    ],
)
def test_parse_set_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_set(text)


def test_parse_remove() -> None:
    assert parse_remove("--a, --b  --c,") == ["--a", "--b", "--c"]
    assert parse_remove("") == []
    with pytest.raises(ValueError, match="not a flag"):
        parse_remove("--a b")
