"""Whether root may run an interpreter on the host: the trust rule, run as POSIX sh.

deploy runs configured interpreters on the host — the compile check (`deploy.checks.compile`)
and the restart's module lookup (`deploy.hostpy.agent_trust`, the same rule in Python). On a GPU
host that interpreter is often a venv or conda env owned by an unprivileged user (``ml``).
Whoever can change the interpreter, its ``pyvenv.cfg`` or the standard library it loads at
start-up (``encodings`` is imported even under ``-I -S``) runs code as whoever starts it: root,
when deploy does. So before root starts one, the host checks it, by the rule state_dir already
follows (`deploy.statedir.trust.TRUST_RULE`): every path below must be owned by root or the login
user and not be writable by group or others (a root-owned sticky directory such as ``/tmp``
passes as a parent; symbolic links are judged by their owner, their targets by the resolved
path):

- the interpreter as given and as resolved through symlinks, and every directory above each
  (the interpreter's own directory holds what it reads next to itself: ``pyvenv.cfg``,
  ``._pth`` files);
- for a venv (``pyvenv.cfg`` beside the interpreter or one directory up, where Python looks):
  that file, and the ``home`` it names (the base interpreter's directory), as written and
  resolved, with every directory above;
- the standard library of the prefix the resolved interpreter belongs to, and of the venv's
  base prefix: ``PREFIX/lib``, ``PREFIX/lib/python3*`` with their ``encodings`` and
  ``lib-dynload`` (``lib64`` too). A non-venv interpreter under a user-owned prefix (a conda
  env made by ``ml``) fails here or at its own directory: its prefix is that user's.

Not covered, on purpose: files *inside* a standard library directory that passed (only root
could have given one to another user: a directory others cannot write keeps its entries
theirs), ``LD_LIBRARY_PATH``/``LD_PRELOAD`` of root's own environment (root's to set), and the
``python3`` found on root's PATH that runs the file helper (the host's own).

The uid of the login user comes from ``[ -O / ]`` (the owner of ``/`` when that is us: root,
the usual case) or ``id -u``, never from ``$EUID`` (review3: environment-spoofable); the caller
sets ``_tI``. Shell variables used: ``_t*``. The rule is shell files in ``deploy/hostsh``:
``venv.sh`` (the ``pyvenv.cfg`` and its ``home``), ``paths.sh`` (every path the rule judges),
``judge.sh`` (one ``stat`` line judged), ``check.sh`` (a whole check, for a command of its own),
``run_as.sh`` (how root runs an untrusted one as its owner), ``missing.sh``, and
``root_only.sh`` (`root_only_if_trusted`). They run in bash and dash
(tests/unit/test_interpreter_trust.py).
"""

from __future__ import annotations

import shlex

from deploy import hostsh

#: How an interpreter is trusted (docs/operations.md shows this text).
TRUST_RULE = """deploy runs interpreters on the host: the compile check (`verify_python`'s `python`)
and the restart's `imports` lookup (the server's interpreter, with
its environment and cwd). Before root starts one, the host checks it by the rule state_dir
follows: the interpreter as given and as resolved through symlinks and every directory above
each; for a venv, its `pyvenv.cfg` and the `home` it names (as written and resolved); and the
standard library directories of its prefixes (`lib`, `lib/python3*` with `encodings` and
`lib-dynload`, `lib64` too) must be owned by root or the login user and not be writable by group
or others. So a venv or conda env another user (say `ml`) owns, made or changed by them, is not
run as root; neither is one whose `pyvenv.cfg` points at their directories. For the `imports`
lookup the site directories of those prefixes, the user site of the environment's `HOME`, every
`PYTHONPATH` entry (a relative one from the cwd) and the cwd, the environment's `LD_LIBRARY_PATH`
and `LD_PRELOAD`, and every directory a symbolic link on the way leads through count too (the
lookup runs the interpreter as given: its venv counts); a lookup run as another user gets only the
variables that decide imports; and a server that runs as another user is always looked
up as that user, with its groups. The check is made by each command for itself. Root then
starts the compile check by the resolved path it judged (a directory above a symlink's target, which the
check never saw, could be swapped between the check and the exec), and a `pyvenv.cfg` that
path would read must be the one judged; one with a `._pth` file beside it (which replaces
`sys.path`) is not trusted.

With a trusted interpreter nothing changes. Otherwise:

- the compile check runs THAT interpreter (its Python version is the point) as its owner
  (`setpriv --reuid --regid --init-groups`, else `runuser -u`), with the file's bytes on its
  stdin, opened by root, an empty environment but `PATH` (not root's: it may hold tokens), its
  stdout discarded and its stderr read through a pipe (never a file root opened, which a process
  it left behind could write to later): the step says `compiled as ml (uid 1001), not root:
  /opt/venv is owned by ml (uid 1001)`. No compile record is read or written for it (a record is trusted by later
  runs, and the owner's process could say anything), so such a check costs its interpreter's
  start on every run and a no-change re-run waits one round trip more (2, not 1); a run with
  a trusted interpreter keeps its round trips and processes;
- the `imports` lookup runs as that user too, and the restart step's plan says so.

When there is nobody to run it as — a path anyone may write, or parts owned by two other users —
or neither `setpriv` nor `runuser` can switch to the owner, the command is refused in one line
(`refusing to run /opt/venv/bin/python as root: ...`, exit status 77) and the step fails (the
host is put back). A login that is not root runs the interpreter as itself, as before. Not
covered: files inside a standard library directory that passed (only root can give one away
there), root's own `LD_PRELOAD`/`LD_LIBRARY_PATH`, what a trusted `#!` wrapper (a pyenv shim)
chooses to start, `verify_command`'s commands (the playbook's own), and the restarted server
itself, which deploy starts as root whatever user the old one ran as. A service's
`agent_python` (deploy's process agent, which must be root to stop and start servers) other
than the default `python3` is checked the same way and refused, not switched, when untrusted.
"""

#: Exit status of a command that refused to run an untrusted interpreter as root.
REFUSED = 77

#: The line a command prints on stdout when it ran the interpreter as its owner (``run_as.sh``).
AS_OWNER = "deploy-interpreter: as "


def ran_as(stdout: str) -> str | None:
    """Who ran the interpreter and why (``run_as.sh``'s line without its prefix), or None."""
    for line in stdout.splitlines():
        if line.startswith(AS_OWNER):
            return line.removeprefix("deploy-interpreter: ")
    return None


def root_only_if_trusted(python: str, command: str) -> str:
    """Shell that runs ``command`` (which starts ``python``) only if the host trusts
    ``python`` (``check.sh``) or the session is not root's; else one line on stderr, exit
    `REFUSED` (``deploy/hostsh/root_only.sh``, then ``command``). For what must run as root
    or not at all: deploy's process agent (``agent_python``), which stops and starts servers.
    Its default, ``python3``, is the host's own, as the file helper's is, and is run
    as before (no check, no process). A ``command`` that starts with ``python`` starts it by
    the resolved path the check judged (``paths.sh``: never through a directory the check
    did not see)."""
    if python == "python3":
        return command
    quoted = shlex.quote(python)
    if command.startswith(quoted + " "):
        command = '"$_tE"' + command.removeprefix(quoted)
    return hostsh.program("root_only.sh", {"_tY": python}) + command
