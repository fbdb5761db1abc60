"""Server flags written as one string — what ``-e set_flags='--x 1 --y'`` gives a playbook.

A template always renders to a string, so flags passed on the command line reach the restart
step's ``args`` as text: ``set`` as a command line, ``remove`` as a list of flags. These parse
them into the mapping and list the step takes, the way SGLang's argparse would read the same
words (`deploy.edits.cmdline.is_flag`: ``-1`` is a value, not a flag). Pure; no I/O.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from deploy.edits.cmdline import is_flag

#: Flags that move the server: its clients would no longer reach it where they did.
MOVING_FLAGS = frozenset({"--host", "--port"})


def parse_set(text: str) -> dict[str, Any]:
    """``"--a 1 --b --c=x --d 1 2"`` -> ``{"--a": "1", "--b": True, "--c": "x", "--d": ["1", "2"]}``.

    A flag without a value is a bare flag (``True``); several values make a list; ``--x=y`` is
    ``--x y``. Empty text is no change.

    Raises:
        ValueError: the text does not split as a shell would (an open quote), or a value
            comes before any flag, or a flag is given twice.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot read {text!r} as a command line: {exc}") from None
    out: dict[str, Any] = {}
    name: str | None = None
    for word in words:
        if is_flag(word):
            name, _, value = word.partition("=")
            if name in out:
                raise ValueError(f"{name} is given twice in {text!r}")
            out[name] = value if value else True
        elif name is None:
            raise ValueError(f"{word!r} is not a flag (flags start with --): {text!r}")
        elif out[name] is True:
            out[name] = word
        elif isinstance(out[name], list):
            out[name].append(word)
        else:
            out[name] = [out[name], word]
    return out


def parse_remove(text: str) -> list[str]:
    """``"--a, --b --c"`` -> ``["--a", "--b", "--c"]``.

    Raises:
        ValueError: a word is not a flag.
    """
    names = [word for word in re.split(r"[\s,]+", text) if word]
    for name in names:
        if not is_flag(name):
            raise ValueError(f"{name!r} is not a flag to remove (flags start with --)")
    return names
