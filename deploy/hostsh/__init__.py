"""The shell programs deploy runs on hosts, kept as ``.sh`` files (issue 32 point 7).

Each file is valid POSIX sh on its own, checked by shellcheck as a file
(tests/unit/test_shellcheck.py), and holds no placeholders: what varies per run — state_dir,
an interpreter's path, a holder's JSON — reaches it as shell variables that `program` assigns
in a preamble of `shlex.quote`d assignments before the file's text. A file names the parts it
runs with a line ``. ./NAME.sh`` at column 0, which `text` replaces by that part's text (the
host has no copy of them to source; shellcheck follows the line with ``-x``). The comment
lines that open a file (its documentation and shellcheck directives) are not sent: what the
host receives is the commands only, as when these programs were Python strings.

Files are read once per process (`functools.cache`), on first use: importing a module that
builds one costs nothing (tests/unit/test_startup_cost.py).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

#: Where the files are (package data: pyproject's ``[tool.setuptools.package-data]``).
DIRECTORY = Path(__file__).resolve().parent

_INCLUDE = re.compile(r"^\. \./([a-z_]+\.sh)$", re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache
def text(name: str) -> str:
    """The commands of ``name`` (e.g. ``"lock.sh"``) with its parts in place, as sent."""
    # Bytes, split on "\n" only: venv.sh holds a literal CR, VT and FF (what str.strip strips).
    lines = (DIRECTORY / name).read_bytes().decode().split("\n")
    start = 0
    while start < len(lines) and (lines[start].startswith("#") or not lines[start].strip()):
        start += 1
    body = "\n".join(lines[start:])
    return _INCLUDE.sub(lambda match: text(match.group(1)).removesuffix("\n"), body)


def assignments(values: Mapping[str, str]) -> str:
    """One ``name=value`` line per item, each value `shlex.quote`d (empty: ``''``)."""
    for name in values:
        if not _NAME.match(name):
            raise ValueError(f"not a shell variable name: {name!r}")
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def program(name: str, values: Mapping[str, str]) -> str:
    """``name``'s text after the assignments of ``values``: what the host runs."""
    return assignments(values) + text(name)
