# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# Judges the interpreter _tP (check.sh; a missing one is "not found", missing.sh) and sets
# _tE, the path to start it by when trusted: the resolved path the check judged (never one
# reached through a directory it did not see), else _tP, else _tY as configured. The caller
# then execs _tE when _tX is empty, else runs it as its owner (owner.sh).
#
# Why (the text of deploy.checks.compile._guard, when this was Python):
# Shell that runs the interpreter ``_tP`` with the arguments ``trusted`` (as root when
# the session is root's) if the host trusts ``_tP`` (`deploy.checks.interpreter`), and
# otherwise compiles the bytes on stdin (``stdin``: a redirection giving them, opened by
# this shell) with that same interpreter started as its owner: the check still says what
# THAT interpreter makes of the file, and nothing the owner planted runs as root. Nothing
# is recorded then (a record is trusted by every later run; the owner's process could lie).
# An interpreter that is not found is left to ``trusted`` (exit 127, as before).
#
# A trusted interpreter is started by its resolved path, ``_tR``, the one the check judged
# with every directory above: started as given (or found again on PATH) it was reached
# through directories the check never saw — those above a symlink's target — which their
# owner could swap between the check and the exec (tests/unit/test_interpreter_attacks.py).
# Under ``-I -S`` a venv adds nothing to the compile (no site), and a ``pyvenv.cfg`` the
# resolved binary would read must be the one judged (`deploy.checks.interpreter.PATHS`).
#
# The owner's process gets the bytes and nothing else of root's: an empty environment but
# `_OWNER_PATH` (root's may hold tokens), stdout to ``/dev/null`` and stderr to a pipe this
# shell drains to EOF, then copies to its own stderr — never the files root opened for the
# command's answer (the lock loop's ``state_dir/.session.N.*``), into which a process the
# owner left behind could write once the command had ended, and so into the next answer's
# frame (tests/integration/test_interpreter_attacks.py). Its stdout was not read anyway
# (`ran_as` reads this shell's line; an owner's ``deploy-compile: reused`` line could only
# mislead). It costs the untrusted path one fork, the command substitution.
#
# ``source``: the file (a shell word) whose bytes the owner's process gets on stdin, or ""
# for the shell's own stdin. Root opens it, so the opened file must be the one named, not
# what a symbolic link its owner put there points to (a file in their venv's site-packages
# is theirs to replace after the helper read it without following links; root followed it
# and handed them a root-only file): after the open, the name must not be a symbolic link
# and must be the very file opened (``/proc/self/fd/5 -ef``); else the check fails.

_tR=
if [ -n "$_tP" ]; then
. ./check.sh
. ./missing.sh
fi
_tE=${_tR:-$_tP}; [ -n "$_tE" ] || _tE=$_tY
