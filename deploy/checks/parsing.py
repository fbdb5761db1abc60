"""One door to ``ast.parse`` for the whole tool, safe when several hosts run in threads.

CPython 3.11.0-3.11.7 can fail ``ast.parse`` called from two threads at once with
``SystemError: AST constructor recursion depth mismatch`` (gh-106905, fixed in 3.11.8). The
benchmark hit it at 20 and 50 hosts: a host was rolled back for no fault of its own. Parsing is
a few milliseconds of GIL-bound work anyway, so serializing it costs nothing measurable.

A run parses the same bytes several times (the insert plans on them and checks its result,
then ``verify_python`` checks the file again), so the last few trees are kept and shared:
callers only read them, never change them.
"""

from __future__ import annotations

import ast
import threading

from deploy.memo import bounded

_LOCK = threading.Lock()


@bounded(8)
def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, serialized across threads and shared (see the module docstring).

    The tree is shared with every other caller that parsed the same bytes: read it, never
    change it.
    """
    with _LOCK:
        return ast.parse(source, filename=filename)
