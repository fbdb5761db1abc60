"""Programs that run ON THE HOST, each sent as the text of one ``python3 -I -S -c`` program.

The host has no `deploy` package, so what runs there (the file helper,
`deploy.remote.fileagent`; the process agent, `deploy.remote.agent`; the gate's load
generator, `deploy.remote.loadgen`) must arrive as one
self-contained program. Kept under ~400 lines a file, such a program is a main module plus
parts it imports: in the main module, the import of a part follows the comment line
`PART_MARKER`. On the workstation (unit tests, mypy) that is an ordinary import; `program`
puts the part's text in its place, so the host runs the same names from one program text,
standard library only. A part must not import `deploy` itself, except its own parts the same
way, and must have no ``if __name__ == "__main__"`` block: under ``-c`` that would run.

The text sent is the code only (`stripped`): docstrings, comments and blank lines are for
the people reading this repository, and the host would receive them on every run — the file
helper travels in the lock's command line, and half of it was prose. On a fresh TCP
connection a burst over the initial window (10 segments, ~14 KB) waits a round trip per
doubling (`bench/window.py`), so those bytes cost round trips on a real link, not only
bandwidth. The code is the same: tests/unit/test_hostprogram.py compares the syntax trees.

Stripping parses and tokenizes each program (~70 ms of CPU for the three), too much for every
run's start-up, so the stripped texts are made once and kept beside this module in
``shipped/NAME.txt`` (`write_shipped`: ``python -m deploy.remote.hostprogram``), each headed
by the sha256 of the source and of the stripper it was made from, and of its own text.
`program` checks those against the source it would assemble now (~1 ms) and strips afresh
when anything differs: an edited helper (or stripper) never reaches a host as its old text,
nor a damaged kept file. tests/unit/test_hostprogram.py fails while a kept text is stale.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

from deploy import ablation

HERE = Path(__file__).resolve().parent
SHIPPED = HERE / "shipped"
#: The programs that run on hosts (each kept stripped in `SHIPPED`).
NAMES = ("agent", "fileagent", "helperboot", "loadgen")
_HEADER = "# sha256 of the source and stripper: "
#: The comment line that marks the next import as a part to inline.
PART_MARKER = "# host-program: part (deploy.remote.hostprogram)"
_PART = re.compile(
    "^" + re.escape(PART_MARKER) + r"\nfrom deploy\.remote\.(\w+) import (?:\([^)]*\)|[^\n]*)\n",
    re.MULTILINE,
)


@functools.cache
def program(name: str) -> str:
    """What the host runs for ``deploy/remote/<name>.py``: its text with every marked part
    import replaced by the part's own text, then `stripped` (the kept text when it was made
    from this very source by this very stripper, and is whole)."""
    source = _assembled(name)
    if ablation.off("codeonly"):
        return source
    try:
        header, _, text = (SHIPPED / f"{name}.txt").read_bytes().decode().partition("\n")
    except (OSError, ValueError):
        header, text = "", ""
    if header == _header(source, text):
        return text
    return stripped(source)


def stripped(source: str) -> str:
    """`deploy.remote.codeonly.stripped`, imported only when a kept text cannot serve (its
    ``tokenize`` is start-up cost every run would pay otherwise)."""
    from deploy.remote.codeonly import stripped as strip

    return strip(source)


def _header(source: str, text: str) -> str:
    """The kept text's first line: digests of its source, of the stripper and of itself."""
    stripper = (HERE / "codeonly.py").read_bytes()
    made_from = hashlib.sha256(source.encode() + b"\0" + stripper).hexdigest()
    return f"{_HEADER}{made_from} text {hashlib.sha256(text.encode()).hexdigest()}"


def shipped_text(name: str) -> str:
    """The content of ``shipped/NAME.txt`` for the current source."""
    source = _assembled(name)
    text = stripped(source)
    return f"{_header(source, text)}\n{text}"


def write_shipped() -> list[Path]:
    """Write every ``shipped/NAME.txt`` that differs from what the source gives (a temp file,
    then a rename: never half a file); the paths written."""
    written = []
    SHIPPED.mkdir(exist_ok=True)
    for name in NAMES:
        path = SHIPPED / f"{name}.txt"
        text = shipped_text(name).encode()
        if not path.exists() or path.read_bytes() != text:
            temp = path.with_name(f".{path.name}.{os.getpid()}")
            temp.write_bytes(text)
            os.replace(temp, path)
            written.append(path)
    return written


def _assembled(name: str) -> str:
    return _PART.sub(
        lambda match: _assembled(match.group(1)), (HERE / f"{name}.py").read_text(encoding="utf-8")
    )


if __name__ == "__main__":
    for changed in write_shipped():
        print(f"wrote {changed.relative_to(HERE.parents[1])}")
