"""Whether root may run an interpreter on the host: the trust rule, as POSIX sh text.

deploy runs configured interpreters on the host — the file helper on the compile check's
interpreter (`deploy.remote.loop.LOOP`), the compile check itself (`deploy.checks.compile`),
the restart's module lookup (`deploy.remote.agent_trust`, the same rule in Python). On a GPU
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
theirs), ``LD_LIBRARY_PATH``/``LD_PRELOAD`` of root's own environment (root's to set), and a
``python3`` found on root's PATH for the file helper (the host's own).

The uid of the login user comes from ``[ -O / ]`` (the owner of ``/`` when that is us: root,
the usual case) or ``id -u``, never from ``$EUID`` (review3: environment-spoofable); the caller
sets ``_tI``. Shell variables used: ``_t*``. The text runs in bash and dash
(tests/unit/test_interpreter_trust.py).
"""

from __future__ import annotations

import shlex

#: How an interpreter is trusted (docs/operations.md shows this text).
TRUST_RULE = """deploy runs interpreters on the host: the file helper (which does every root write,
saved copy and journal record) on the compile check's interpreter, the compile check itself
(`verify_python`'s `python`), and the restart's `imports` lookup (the server's interpreter, with
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
up as that user, with its groups. The check is made in the lock's own exec for the file helper
(no extra process) and by each command for itself. Root then starts the file helper and the
compile check by the resolved path it judged (a directory above a symlink's target, which the
check never saw, could be swapped between the check and the exec), and a `pyvenv.cfg` that
path would read must be the one judged; one with a `._pth` file beside it (which replaces
`sys.path`) is not trusted.

With a trusted interpreter nothing changes. Otherwise:

- the file helper runs on the host's own `python3`, as it did before the helper moved to the
  compile check's interpreter;
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

#: Before the caller's ``realpath``: ``_tP``, the interpreter (absolute), gives ``_tV`` — the
#: ``pyvenv.cfg`` Python would read (``_tP``'s directory, else the one above) — and ``_tH``, its
#: first ``home`` value: CPython's getpath stops at the first (3.11 checked: with two ``home``
#: lines its stdlib came from the first; tests/unit/test_interpreter_attacks.py), with spaces,
#: tabs, CR, VT and FF stripped around key and value as ``str.strip`` strips them. ``_tX``: a
#: reason already (a relative path, a line break). Builtins only.
VENV = r"""_tX=; _tV=; _tH=; _tU=; _tN=; _tw=
case $_tP in /*) ;; *) _tX="$_tP is not an absolute path" ;; esac
case $_tP in *'
'*) _tX="the interpreter's path holds a line break" ;; esac
for _tq in "${_tP%/*}" "${_tP%/*/*}"; do
  if [ -n "$_tq" ] && [ -f "$_tq/pyvenv.cfg" ]; then _tV=$_tq/pyvenv.cfg; break; fi
done
if [ -n "$_tV" ]; then
  while IFS= read -r _tl || [ -n "$_tl" ]; do
    case $_tl in *=*) ;; *) continue ;; esac
    _tk=${_tl%%=*}; _tk=${_tk#"${_tk%%[!_WS_]*}"}; _tk=${_tk%"${_tk##*[!_WS_]}"}
    case $_tk in [Hh][Oo][Mm][Ee]) ;; *) continue ;; esac
    _tH=${_tl#*=}; _tH=${_tH#"${_tH%%[!_WS_]*}"}; _tH=${_tH%"${_tH##*[!_WS_]}"}; break
  done <"$_tV" 2>/dev/null
  case $_tH in /*) ;; *) _tX="$_tV names no absolute home ($_tH)" ;; esac
fi
""".replace("_WS_", " \t\r\v\f")

#: After the caller's ``realpath``: ``_tR`` and ``_tG``, ``_tP`` and ``_tH`` resolved. Root
#: starts a trusted interpreter as ``_tR`` (the path judged, with no symlink left to follow
#: through a directory nobody judged), so a ``pyvenv.cfg`` that ``_tR`` would read must be
#: ``_tV``, the one whose ``home`` was judged; else ``_tX`` says so. So does a ``._pth`` file
#: beside the interpreter (``python3.11._pth``: CPython 3.11 takes sys.path, the stdlib
#: included, from its lines on Linux too; they are not judged). Appends
#: to the positional parameters every path the rule checks (module docstring), for the
#: caller's one ``stat``. Builtins only (globs; ``[ -e ]`` drops what does not exist). A
#: directory already listed ends a chain (its parents are listed too): each line of the
#: caller's ``stat`` costs its shell ~50 us to judge, and the resolved path mostly shares the
#: given one's directories.
PATHS = r"""_ts=/ _tq=
for _tk in "${_tR%/*}" "${_tR%/*/*}"; do
  if [ -n "$_tk" ] && [ -f "$_tk/pyvenv.cfg" ]; then _tq=$_tk/pyvenv.cfg; break; fi
done
if [ -n "$_tq" ] && ! [ "$_tq" -ef "$_tV" ]; then _tX="$_tR would read $_tq, not ${_tV:-no pyvenv.cfg}"; fi
for _tk in "$_tP._pth" "$_tR._pth"; do [ -e "$_tk" ] && _tX="$_tk replaces sys.path (not judged)"; done
for _tq in "$_tP" "$_tR" "$_tH" "$_tG"; do
  while [ -n "$_tq" ]; do
    case $_ts in *"
$_tq
"*) break ;; esac
    set -- "$@" "$_tq"; _ts="$_ts
$_tq
"; _tq=${_tq%/*}
  done
done
[ -n "$_tV" ] && set -- "$@" "$_tV"
for _tq in "${_tR%/*/*}" "${_tG%/*}"; do
  for _tl in "$_tq"/lib "$_tq"/lib64; do
    [ -n "$_tq" ] && [ -d "$_tl" ] || continue
    set -- "$@" "$_tl"
    for _tk in "$_tl"/python3*; do
      [ -d "$_tk" ] || continue
      set -- "$@" "$_tk"
      for _tm in "$_tk"/encodings "$_tk"/lib-dynload; do [ -d "$_tm" ] && set -- "$@" "$_tm"; done
    done
  done
done
"""

#: ``_tj UID HEXMODE OWNER NAME``: one ``stat -c '%u %f %U %n'`` line of those paths, judged
#: against ``_tI`` (the login uid). Sets ``_tX`` (the first reason it fails) and ``_tU``/``_tN``:
#: the one other user whose paths these are, whom a root caller may run the interpreter as
#: (``-`` when there is none to pick: two other owners, or a path anyone may write, which is
#: then the reason given).
JUDGE = r"""_tj() {
  if [ "$1" != 0 ] && [ "$1" != "$_tI" ]; then
    [ -n "$_tX" ] || _tX="$4 is owned by $3 (uid $1)"
    if [ -z "$_tU" ]; then _tU=$1; _tN=$3; elif [ "$_tU" != "$1" ]; then _tU=-; fi
  elif [ $((0x$2 & 61440)) = 40960 ] || [ $((0x$2 & 18)) = 0 ]; then :
  elif [ $((0x$2 & 512)) != 0 ] && [ "$1" = 0 ] && [ $((0x$2 & 61440)) = 16384 ]; then :
  else
    [ -n "$_tw" ] || _tX="$4 is writable by group or others (mode $(printf %o $((0x$2 & 4095))), owner $3)"
    _tU=-; _tw=1
  fi
}
"""

#: A whole check, for a command of its own (`deploy.checks.compile`): ``_tP`` in; ``_tX``
#: empty when trusted; else ``_tU``/``_tN`` as `JUDGE`. One ``realpath`` and one ``stat``.
#: ``_tM`` set: trusted only because the interpreter did not exist when judged (a missing
#: path under a sticky ``/tmp`` is anyone's to create before the exec): the caller says
#: "not found", exit 127, as the exec would have (`MISSING`).
#: ``_tI``: the login uid (``[ -O / ]``, else ``id -u``).
CHECK = (
    VENV
    + JUDGE
    + r"""_tR=; _tG=; _tM=
if [ -z "$_tX" ]; then
  if [ -n "$_tH" ]; then _tx=$(realpath -m -- "$_tP" "$_tH"); else _tx=$(realpath -m -- "$_tP"); fi
  _tR=${_tx%%'
'*}; [ -n "$_tH" ] && _tG=${_tx#*'
'}
  case $_tR$_tG in *'
'*) _tX="a resolved path of $_tP holds a line break" ;; esac
fi
if [ -z "$_tX" ]; then
  set -- / ; """
    + PATHS.replace("\n", "\n  ")
    + r"""_tL=$(stat -c '%u %f %U %n' -- "$@" 2>/dev/null)
  if [ -O / ]; then _tI=${_tL%% *}; else _tI=$(id -u); fi
  while read -r _tu _tf _to _tn; do [ -n "$_tu" ] && _tj "$_tu" "$_tf" "$_to" "$_tn"; done <<_tEOF
$_tL
_tEOF
  case "$_tL
" in *" $_tR
"*) ;; *) [ -n "$_tX" ] || _tM=1 ;; esac
fi
"""
)

#: After `CHECK` found the interpreter untrusted, in a command that root runs: sets ``_tS`` to
#: how to start it as ``_tN`` (uid ``_tU``) — ``setpriv`` with that user's groups, else
#: ``runuser`` — or prints one line on stderr and exits `REFUSED`. A caller that is not root
#: runs it as itself (``_tS`` empty): it has no one to drop to, and its own files are what
#: the interpreter's owner could reach.
RUN_AS = r"""_tS=
if [ -O / ]; then
  if [ -z "$_tU" ] || [ "$_tU" = - ]; then
    echo "deploy: refusing to run $_tP as root: $_tX; no single user owns it to run it as" >&2; exit 77
  fi
  if command -v setpriv >/dev/null 2>&1 && _tg=$(id -g -- "$_tU" 2>/dev/null); then
    _tS="setpriv --reuid=$_tU --regid=$_tg --init-groups --"
  elif command -v runuser >/dev/null 2>&1 && [ "$_tN" != UNKNOWN ]; then
    _tS="runuser -u $_tN --"
  else
    echo "deploy: refusing to run $_tP as root: $_tX; neither setpriv nor runuser can run it as $_tN (uid $_tU)" >&2; exit 77
  fi
  printf '%s\n' "deploy-interpreter: as $_tN (uid $_tU), not root: $_tX"
fi
"""

#: After `CHECK`: a missing interpreter is not found (exit 127), not created and then run.
MISSING = '[ -z "$_tM" ] || { printf \'%s: not found\\n\' "$_tP" >&2; exit 127; }\n'

#: Exit status of a command that refused to run an untrusted interpreter as root.
REFUSED = 77

#: The line a command prints on stdout when it ran the interpreter as its owner (`RUN_AS`).
AS_OWNER = "deploy-interpreter: as "


def ran_as(stdout: str) -> str | None:
    """Who ran the interpreter and why (`RUN_AS`'s line without its prefix), or None."""
    for line in stdout.splitlines():
        if line.startswith(AS_OWNER):
            return line.removeprefix("deploy-interpreter: ")
    return None


def root_only_if_trusted(python: str, command: str) -> str:
    """Shell that runs ``command`` (which starts ``python``) only if the host trusts
    ``python`` (`CHECK`) or the session is not root's; else one line on stderr, exit
    `REFUSED`. For what must run as root or not at all: deploy's process agent
    (``agent_python``), which stops and starts servers. Its default, ``python3``, is the
    host's own, as the file helper's fallback is, and is run as before (no check, no
    process). A ``command`` that starts with ``python`` starts it by the resolved path the
    check judged (`PATHS`: never through a directory the check did not see)."""
    if python == "python3":
        return command
    quoted = shlex.quote(python)
    if command.startswith(quoted + " "):
        command = '"$_tE"' + command.removeprefix(quoted)
    return (
        f"case {quoted} in /*) _tP={quoted} ;; *) _tP=$(command -v {quoted} 2>/dev/null) ;; esac\n"
        '_tR=\nif [ -n "$_tP" ] && [ -O / ]; then\n'
        + CHECK
        + 'if [ -n "$_tX" ]; then echo "deploy: refusing to run $_tP as root: $_tX" >&2; '
        + f"exit {REFUSED}; fi\n"
        + MISSING
        + "fi\n"
        + f'_tE=${{_tR:-$_tP}}; [ -n "$_tE" ] || _tE={quoted}\n'
        + command
    )
