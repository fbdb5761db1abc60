"""Compute a pure function once per distinct input, however many hosts ask at the same time.

A fleet is usually many copies of the same file: twenty hosts on SGLang 0.5.9 hold the same
``kimi_k25.py`` byte for byte. Parsing it, planning the insert and checking the result are pure
(bytes in, bytes or problems out) and cost ~20 ms of GIL-bound CPU per host — at 20 hosts,
0.4 s of a 2-core workstation spent recomputing one answer. `once` memoizes such a function
across the run's host threads: the first thread to ask computes, the others asking for the same
input wait for its answer instead of computing it again ("single flight"). Failures are not
kept (each caller gets its own exception, with its own traceback), and the table is bounded.

The same file often sits at a different path on each host (one virtualenv per host, or the
benchmark's hosts sharing one machine), and a path that only names the file in error messages
must not make each host compute the answer again: `once_ignoring` leaves such arguments out of
the key. That is right only when a successful answer does not depend on them; failures, which
do name the path, are never kept, so each caller still gets an exception naming its own file.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: Distinct inputs kept per function: a fleet holds a handful of versions of a file.
SIZE = 32


class _Slot:
    """One input's answer, and the lock its first asker holds while computing it."""

    __slots__ = ("done", "lock", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False
        self.value: Any = None


def once(fn: Callable[P, R]) -> Callable[P, R]:
    """Memoize ``fn`` (pure, returning an immutable value) across threads; see the module doc.

    Arguments are keyed by ``repr``, so lists and dicts of plain values are accepted; ``fn``
    must not depend on anything but its arguments.
    """
    return bounded(SIZE)(fn)


def once_ignoring(*names: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`once`, with the keyword arguments ``names`` left out of the key (see the module doc).

    Only for arguments a successful answer does not depend on (a path used in error messages
    only): the first caller's answer is every caller's. They must be passed by keyword.
    """
    ignored = frozenset(names)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        return _memoize(fn, SIZE, ignored)

    return decorate


def bounded(size: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`once`, keeping at most ``size`` inputs (for results that are large, like ASTs)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        return _memoize(fn, size)

    return decorate


def _memoize(
    fn: Callable[P, R], size: int, ignored: frozenset[str] = frozenset()
) -> Callable[P, R]:
    table: OrderedDict[tuple[Any, ...], _Slot] = OrderedDict()
    guard = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        key = tuple(a if isinstance(a, bytes | str) else repr(a) for a in args) + tuple(
            (k, repr(v)) for k, v in sorted(kwargs.items()) if k not in ignored
        )
        with guard:
            slot = table.get(key)
            if slot is None:
                slot = table[key] = _Slot()
                while len(table) > size:
                    table.popitem(last=False)
            else:
                table.move_to_end(key)
        with slot.lock:
            if not slot.done:
                slot.value = fn(*args, **kwargs)  # an exception leaves the slot empty
                slot.done = True
            return slot.value  # type: ignore[no-any-return]

    wrapper.cache_clear = table.clear  # type: ignore[attr-defined]
    return wrapper
