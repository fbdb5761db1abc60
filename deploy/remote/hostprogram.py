"""Programs that run ON THE HOST, each sent as the text of one ``python3 -I -S -c`` program.

The host has no `deploy` package, so what runs there (the file helper,
`deploy.hostpy.fileagent`; the process agent, `deploy.hostpy.agent`; the gate's load
generator, `deploy.hostpy.loadgen`) must arrive as one
self-contained program. Kept under ~400 lines a file, such a program is a main module plus
parts it imports: in the main module, the import of a part follows the comment line
`PART_MARKER`. On the workstation (unit tests, mypy) that is an ordinary import; `program`
puts the part's text in its place, so the host runs the same names from one program text,
standard library only. A part must not import `deploy` itself, except its own parts the same
way, and must have no ``if __name__ == "__main__"`` block: under ``-c`` that would run.

The text is sent as written, docstrings and comments included: stripping them to code saved
~4.5 kB a run after compression and no round trip (docs/performance.md, "Ablation").
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "hostpy"
#: The programs that run on hosts.
NAMES = ("agent", "fileagent", "loadgen")
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
