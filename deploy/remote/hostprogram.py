"""The text of a program that runs ON THE HOST (`deploy.hostpy`): the host has no `deploy`.

Kept under ~400 lines a file, such a program is a main module plus parts: the import of a part
follows the comment line `PART_MARKER`. On the workstation (unit tests, mypy) that is an
ordinary import; `program` puts the part's text in its place, so the host runs the same names.
A part imports no `deploy` module but its own parts, the same way, and has no ``if __name__
== "__main__"`` block (under ``-c`` it would run). The text goes as written, docstrings
included: stripping them saved ~4.5 kB a run after compression and no round trip
(docs/performance.md, "Ablation").
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "hostpy"
#: The comment line that marks the next import as a part to inline.
PART_MARKER = "# host-program: part (deploy.remote.hostprogram)"
_PART = re.compile(
    "^" + re.escape(PART_MARKER) + r"\nfrom deploy\.hostpy\.(\w+) import (?:\([^)]*\)|[^\n]*)\n",
    re.MULTILINE,
)


@functools.cache
def program(name: str) -> str:
    """What the host runs for ``deploy/remote/<name>.py``: its text with every marked part
    import replaced by the part's own text."""
    return _PART.sub(
        lambda match: program(match.group(1)), (HERE / f"{name}.py").read_text(encoding="utf-8")
    )
