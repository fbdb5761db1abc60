"""The file helper's JSON (`deploy.remote.hostjson`): ``json``'s own text and values, and the
helper's start-up without the modules ``json``, ``hashlib`` and ``base64`` would load."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from deploy.remote import hostjson
from deploy.remote.hostprogram import program


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 3 else 6)
    if kind == 0:
        return rng.randrange(-(2**70), 2**70)
    if kind == 1:
        return rng.uniform(-1e6, 1e6)
    if kind == 2:
        return rng.choice([None, True, False])
    if kind in (3, 4, 5):
        return "".join(
            rng.choice('ab\u00e9\u4e2d\U0001f600"\\\n\t\x00/') for _ in range(rng.randrange(6))
        )
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(_value(rng, 3)): _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_the_accelerated_pair_is_in_use() -> None:
    """On this interpreter the helper does not fall back to ``json`` (the saving is real)."""
    assert hostjson.loads is not json.loads and hostjson.dumps is not json.dumps


@pytest.mark.parametrize("seed", range(5))
def test_same_text_and_values_as_json(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        value = _value(rng)
        text = hostjson.dumps(value)
        assert text == json.dumps(value)
        assert hostjson.loads(text) == json.loads(text)
        assert hostjson.loads(text.encode()) == json.loads(text)
        assert hostjson.loads(f" \n{text}\t ") == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": 1} x', '{"a": 1}{}', "[1,]", "nul"])
def test_bad_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        hostjson.loads(text)


def test_what_json_refuses_to_encode_is_refused() -> None:
    for value in ({1j: 1}, [b"bytes"], {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            hostjson.dumps(value)


def test_the_helper_starts_without_json_re_hashlib_or_base64() -> None:
    """What its start-up imports is what every run costs every host (issue 17: ~11 ms of
    the helper's ~26 were ``json`` with ``re``, ``hashlib`` and ``base64``)."""
    source = program("fileagent").replace(
        'if __name__ == "__main__":', 'if __name__ == "__main__" and False:'
    )
    probe = source + "\nimport sys\nprint(' '.join(sorted(sys.modules)))\n"
    loaded = set(
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert not loaded & {"json", "re", "hashlib", "base64", "contextlib", "enum", "functools"}
