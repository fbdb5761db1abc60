"""One door to ``ast.parse`` for the whole tool, safe when several hosts run in threads.

CPython 3.11.0-3.11.7 can fail ``ast.parse`` called from two threads at once with
``SystemError: AST constructor recursion depth mismatch`` (gh-106905, fixed in 3.11.8). The
benchmark hit it at 20 and 50 hosts: a host was rolled back for no fault of its own. Parsing is
a few milliseconds of GIL-bound work anyway, so serializing it costs nothing measurable.

A run parses the same bytes several times (the insert plans on them and checks its result,
then ``verify_python`` checks the file again), and a fleet holds the same file on every host,
so the last few trees are kept and shared: callers only read them, never change them. They are
keyed by the bytes alone, not the file name: a tree does not record its file name (only a
``SyntaxError`` does), and the same file installed at a different path on each host (one venv
per host, or the benchmark's hosts sharing one machine) is still parsed once — at 20 hosts that
was 0.16 s of a 0.6 s run's GIL time.
"""

from __future__ import annotations

import ast
import threading

from deploy.memo import bounded

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, serialized across threads and shared (see the module docstring).

    The tree is shared with every other caller that parsed the same bytes: read it, never
    change it. A ``SyntaxError`` names ``filename``: failures are not kept, so the source is
    parsed again with the caller's name.
    """
    try:
        return _shared(source)
    except (SyntaxError, ValueError):
        pass
    with _LOCK:
        return ast.parse(source, filename=filename)


@bounded(8)
def _shared(source: str | bytes) -> ast.Module:
    with _LOCK:
        return ast.parse(source)
