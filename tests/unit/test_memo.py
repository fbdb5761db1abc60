"""`deploy.memo.once`: one computation per distinct input, across the hosts' threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from deploy import memo
from deploy.checks.python_ast import check_python
from deploy.edits.pyinsert import insert_into_class


def test_twenty_threads_asking_at_once_compute_once() -> None:
    calls: list[bytes] = []
    barrier = threading.Barrier(20)

    @memo.once
    def slow(source: bytes, *, names: list[str]) -> tuple[str, ...]:
        calls.append(source)
        time.sleep(0.05)  # every other thread arrives while this one computes
        return tuple(names)

    def ask(_: int) -> tuple[str, ...]:
        barrier.wait()
        return slow(b"same", names=["a", "b"])

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(ask, range(20)))
    assert answers == [("a", "b")] * 20
    assert calls == [b"same"]
    assert slow(b"same", names=["a", "c"]) == ("a", "c"), "another argument is another input"
    assert len(calls) == 2


def test_failures_are_not_kept_and_the_table_is_bounded() -> None:
    calls = []

    @memo.once
    def fragile(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return n * 2

    with pytest.raises(ValueError):
        fragile(1)
    assert fragile(1) == 2 and fragile(1) == 2
    assert calls == [1, 1]
    for n in range(memo.SIZE + 5):
        fragile(100 + n)
    fragile(1)
    assert calls.count(1) == 3, "the oldest input was evicted"


def test_the_real_edit_and_check_are_shared_and_callers_get_their_own_list() -> None:
    source = b"class A:\n    x = 1\n"
    first = insert_into_class(source, "A", "def f(self):\n    return 1\n", path="/a.py")
    assert insert_into_class(source, "A", "def f(self):\n    return 1\n", path="/a.py") is first
    expected = ["/a.py: class A (line 1) does not define f in its body"]
    problems = check_python(source, class_has={"A": ["f"]}, path="/a.py")
    assert problems == expected
    problems.append("the caller's own addition")
    assert check_python(source, class_has={"A": ["f"]}, path="/a.py") == expected


def test_once_ignoring_leaves_the_named_keywords_out_of_the_key() -> None:
    calls: list[str] = []

    @memo.once_ignoring("path")
    def measure(source: bytes, *, path: str) -> int:
        calls.append(path)
        if source == b"bad":
            raise ValueError(f"{path}: bad")  # names the caller's path: never kept
        return len(source)

    assert measure(b"abc", path="/a") == 3 and measure(b"abc", path="/b") == 3
    assert calls == ["/a"], "a path used only in messages is not part of the input"
    for path in ("/a", "/b"):
        with pytest.raises(ValueError, match=f"^{path}: bad$"):
            measure(b"bad", path=path)


# The benchmark's hosts (and a fleet with one virtualenv per host) hold the same bytes at a
# different path on each host: each pure computation must still run once for all of them.
_PATHS = [f"/srv/host-{n}/kimi_k25.py" for n in range(20)]


def test_the_insert_is_computed_once_for_the_same_bytes_at_twenty_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deploy.edits import pyinsert

    counted: list[str] = []
    real = pyinsert.code_items
    monkeypatch.setattr(
        pyinsert, "code_items", lambda *a, **k: counted.append("x") or real(*a, **k)
    )
    source = b"class Twenty:\n    x = 1\n"
    results = [
        insert_into_class(source, "Twenty", "def f(self):\n    return 1\n", path=path)
        for path in _PATHS
    ]
    assert len(counted) == 1
    assert all(r is results[0] for r in results) and results[0].changed
    for path in _PATHS[:2]:  # a failure is each caller's own, naming its own path
        with pytest.raises(Exception, match=f"not found in {path}"):
            insert_into_class(source, "Missing", "def f(self):\n    pass\n", path=path)


def test_the_diff_is_computed_once_for_the_same_bytes_at_twenty_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deploy.edits import text

    counted: list[int] = []
    real = text.diff_opcodes
    monkeypatch.setattr(text, "diff_opcodes", lambda a, b: counted.append(1) or real(a, b))
    old, new = b"one\ntwenty\nthree\n", b"one\ntwenty-two\nthree\n"
    diffs = [text.unified_diff(old, new, path) for path in _PATHS]
    assert len(counted) == 1
    for path, diff in zip(_PATHS, diffs, strict=True):
        name = path.lstrip("/")
        assert diff == (
            f"--- a/{name}\n+++ b/{name}\n@@ -1,3 +1,3 @@\n one\n-twenty\n+twenty-two\n three\n"
        )


def test_the_python_check_is_computed_once_for_the_same_bytes_at_twenty_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deploy.checks import python_ast

    counted: list[int] = []
    real = python_ast.module_level_definitions
    monkeypatch.setattr(
        python_ast, "module_level_definitions", lambda tree: counted.append(1) or real(tree)
    )
    source = b"class TwentyChecks:\n    x = 1\n\ndef g():\n    pass\n"
    for path in _PATHS:
        assert check_python(
            source, class_has={"TwentyChecks": ["f"]}, not_module_level=["g"], path=path
        ) == [
            f"{path}: class TwentyChecks (line 1) does not define f in its body",
            f"{path}: g is defined at module level (line 4), outside any class",
        ]
    assert len(counted) == 1
    broken = b"class TwentyChecks(:\n"
    assert check_python(broken, path="/a.py") == ["/a.py:1: does not parse: invalid syntax"]
    assert check_python(broken, path="/b.py") == ["/b.py:1: does not parse: invalid syntax"]
