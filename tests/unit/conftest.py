"""Shared unit-test fixtures."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pytest

from deploy.sandbox.wheels import kimi_k25_source


@pytest.fixture(scope="session")
def kimi_source() -> Callable[[str], bytes]:
    """``kimi_source("0.5.9")``: the real bytes of SGLang's kimi_k25.py (wheel cached once)."""
    return cache(kimi_k25_source)
