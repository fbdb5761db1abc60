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
