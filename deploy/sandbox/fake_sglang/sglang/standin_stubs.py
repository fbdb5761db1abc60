"""SGLang's dependencies as stubs, so that SGLang's real model file imports here as it would on
a GPU host: its own module-level and class-body code runs for real (a NameError, a missing
import of its own, a bad decorator all fail as they would), while ``torch``, ``numpy``,
``transformers`` and the ``sglang.srt`` modules the stand-in does not have are empty stand-ins
that accept any attribute, call, subscript, base class or decorator use.

Installed by the stand-in's ``sglang/__init__.py`` as the *last* finder: a module that exists
on disk (the real ``kimi_k25.py``, the stand-in's own modules) is always the real one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

STUBBED = ("numpy", "torch", "transformers", "sglang.")


class _Stub:
    """Anything: attributes, calls, subscripts give more of it; as a base class it is
    ``object``; as a decorator of a function or class it returns what it decorates."""

    def __init__(self, name: str = "stub") -> None:
        self._name = name

    def __getattr__(self, name: str) -> _Stub:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return _Stub(f"{self._name}()")

    def __getitem__(self, item: Any) -> _Stub:
        return self

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __iter__(self) -> Any:
        return iter(())

    def __or__(self, other: Any) -> _Stub:
        return self

    __ror__ = __or__


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> _Stub:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname in STUBBED or fullname.startswith(STUBBED) or fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
