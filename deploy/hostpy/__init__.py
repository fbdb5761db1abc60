"""The Python programs that run ON THE HOST, and `program`, which gives the text the host runs.

The programs: the file helper (`fileagent`, with its part `fileagent_ops`), the process agent
(`agent`, with `agent_proc` and `agent_trust`) and the trust rule they share (`trust_rule`).
Each is sent as the text of one ``python3 -I -S -c`` program (the host has no `deploy`) and runs
on whatever python3 the host has: standard library only, Python 3.8 syntax, no annotations.
The shell programs are `deploy.hostsh`.

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

#: The comment line that marks the next import as a part to inline.
PART_MARKER = "# host-program: part (deploy.hostpy.program)"
_PART = re.compile(
    "^" + re.escape(PART_MARKER) + r"\nfrom deploy\.hostpy\.(\w+) import (?:\([^)]*\)|[^\n]*)\n",
    re.MULTILINE,
)


@functools.cache
def program(name: str) -> str:
    """What the host runs for ``deploy/hostpy/<name>.py``: its text with every marked part
    import replaced by the part's own text."""
    text = (Path(__file__).parent / f"{name}.py").read_text(encoding="utf-8")
    return _PART.sub(lambda match: program(match.group(1)), text)
