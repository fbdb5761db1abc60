"""deploy: declarative remote deployment over SSH, verified, with automatic rollback.

The Python API (`deploy.api`, docs/api.md)::

    from deploy import plan, apply, rollback, CancelToken

    report = apply("kimi-eagle3", inventory="hosts.yaml")
    report.exit_code, report.to_dict()   # what `deploy apply --json` prints

The names are looked up on first use, so ``import deploy`` (and every ``deploy`` command's
start-up) loads nothing more than this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deploy.api import CancelToken, apply, plan, rollback

__all__ = ["CancelToken", "apply", "plan", "rollback"]


def __getattr__(name: str) -> Any:
    """`deploy.api`'s names, imported when first asked for (PEP 562)."""
    if name in __all__:
        from deploy import api

        return getattr(api, name)
    raise AttributeError(f"module 'deploy' has no attribute {name!r}")
