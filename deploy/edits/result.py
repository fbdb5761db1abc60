"""The value every edit returns: the new bytes, whether they differ, and one line saying why.

Steps show ``summary`` in the plan ("inserted ... at the end of class X" or "no change: ...
already present") and write ``content`` only when ``changed`` is true, so a re-run on a host
that is already in the desired state touches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EditResult:
    """The outcome of computing an edit; frozen so a plan cannot be altered after it is shown.

    Attributes:
        content: the complete new file content (equal to the input when ``changed`` is false).
        changed: whether ``content`` differs from the input.
        summary: one line for humans, e.g. "no change: patch already applied".
    """

    content: bytes
    changed: bool
    summary: str
