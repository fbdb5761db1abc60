"""Starts the file helper ON THE HOST, with the exit statuses the lock's shell acts on.

The lock's shell starts the file helper (`deploy.hostpy.fileagent`) once per run as
``PYTHON -I -S -c BOOT SOURCE 3 4 STATE_DIR`` (``deploy/hostsh/loop.sh``), PYTHON being the
interpreter the run's compile check names when the lock found it trusted, else python3. That
interpreter may be unable to run the helper (too old, not Python 3): this program then exits
`CANNOT` and the shell starts it on python3 instead. A helper that fails once started exits
`FAILED`, never 1 or 2, so the shell never takes it for a start that failed and starts a
second helper. (The helper's compiled code used to be kept in state_dir between runs: ~7 ms
of the host's CPU per run, under 2 % of a run, so it was removed: docs/performance.md,
"Ablation".)

Standard library only, no syntax newer than Python 3.8, no annotations; ``sys.argv`` is given
to the helper as if it had been started with ``-c SOURCE 3 4``.
"""

import os
import sys

#: Exit status when this interpreter cannot run the helper (too old, or its source does not
#: compile here): the lock's shell then starts it with python3 instead (`deploy.remote.session`).
#: Python itself exits 2 on an option it does not know and 1 on a syntax error in this program.
CANNOT = 2
#: Exit status when the helper, once started, ended with an error.
FAILED = 70


def main():
    source = sys.argv[1]
    if sys.version_info < (3, 8):  # noqa: UP036  # the host's interpreter, not ours
        sys.exit(CANNOT)
    try:
        code = compile(source, "<deploy file helper>", "exec", dont_inherit=True)
    except Exception:
        sys.exit(CANNOT)
    sys.argv = ["-c", *sys.argv[2:-1]]
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(FAILED)


if __name__ == "__main__":
    main()
