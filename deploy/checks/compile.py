"""Make the host's own interpreter compile a file, and turn its answer into one line.

The edit already checked the file with the local ``ast``, but the host may run another Python
version (a newer grammar, an older one): the check that counts is the one made by the
interpreter that will import the file. The command only compiles, in memory: unlike
``python -m py_compile`` it writes no ``.pyc`` next to the file (nor anywhere), so checking
leaves the host exactly as it was. Running it is the remote layer's job; nothing here performs
I/O.
"""

from __future__ import annotations

import shlex

#: Runs under any Python 3 (no f-strings): print one line on failure, exit 1.
_SCRIPT = """import sys
p = sys.argv[1]
try:
    with open(p, "rb") as f:
        compile(f.read(), p, "exec", dont_inherit=True)
except (SyntaxError, ValueError, OSError) as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
"""

#: Runs under any Python 3: compile the bytes on stdin (``--check``: the planned content).
_STDIN_SCRIPT = (
    'import sys; compile(sys.stdin.buffer.read(), sys.argv[1], "exec", dont_inherit=True)'
)

#: ``-B`` no bytecode written, ``-I`` isolated from the caller's environment and user site,
#: ``-S`` no ``site`` at all: compile() needs nothing from site-packages, and processing its
#: ``.pth`` files is most of a venv interpreter's start-up (~20 ms of the ~25 here).
_FLAGS = ("-B", "-I", "-S")

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


def compile_command(python: str, path: str) -> str:
    """A shell command that compiles ``path`` with ``python`` and writes nothing to disk.

    ``python`` is one executable (a name on PATH or a path), not a command line; see `_FLAGS`
    for how it is started. Exit status 0 means the file compiles;
    otherwise stderr's last line is ``SyntaxError: MESSAGE (FILE, line N)`` (or the
    ``ValueError``/``OSError`` that stopped it); see `compile_problem`.
    """
    return " ".join(shlex.quote(arg) for arg in (python, *_FLAGS, "-c", _SCRIPT, path))


def compile_stdin_command(python: str, path: str) -> str:
    """Like `compile_command`, for content sent on stdin (``path`` names it in messages)."""
    return " ".join(shlex.quote(arg) for arg in (python, *_FLAGS, "-c", _STDIN_SCRIPT, path))


def compile_problem(exit_status: int, stderr: str, *, python: str | None = None) -> str | None:
    """One line describing why the compile command failed, or None when it succeeded.

    Args:
        exit_status: the command's exit status (127: the shell did not find the interpreter).
        stderr: its standard error; only the last non-empty line is used.
        python: the interpreter, named in the message when given.
    """
    if exit_status == 0:
        return None
    name = f" {python}" if python else ""
    if exit_status == EXIT_NOT_FOUND:
        return f"interpreter not found{':' + name if name else ''}"
    if exit_status == EXIT_NOT_EXECUTABLE:
        return f"interpreter cannot be executed (permission denied?){':' + name if name else ''}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = lines[-1] if lines else f"exit status {exit_status}, no output"
    return f"does not compile{' with' + name if name else ''}: {reason}"
