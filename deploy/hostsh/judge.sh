# shellcheck shell=sh
# GENERATED from deploy.hostpy.trust_rule.RULE by `python -m tools.hostsh_judge`: edit the
# table there, not this file (tests/unit/test_trust_rule.py holds the two to the same cases).
# Part of the interpreter trust check (deploy.checks.interpreter; check.sh).
#
# _tj UID HEXMODE OWNER NAME: one `stat -c '%u %f %U %n'` line of those paths, judged
# against _tI (the login uid). Sets _tX (the first reason it fails: the first path writable
# by group or others, else the first owned by another user) and _tU/_tN: the one other user
# whose paths these are, whom a root caller may run the interpreter as (- when there is none
# to pick: two other owners, or a path anyone may write, which is then the reason given).
# Rows, in order (the first that holds decides; none: writable):
#   1. owned by another user: other owner
#   2. a symbolic link (judged by its owner; its target is judged as resolved): trusted
#   3. not writable by group or others: trusted
#   4. a root-owned sticky directory (/tmp: nobody else can rename what is in it): trusted

_tj() {
  if [ "$1" != 0 ] && [ "$1" != "$_tI" ]; then
    [ -n "$_tX" ] || _tX="$4 is owned by $3 (uid $1)"
    if [ -z "$_tU" ]; then _tU=$1; _tN=$3; elif [ "$_tU" != "$1" ]; then _tU=-; fi
  elif [ $((0x$2 & 61440)) = 40960 ]; then
    :
  elif [ $((0x$2 & 18)) = 0 ]; then
    :
  elif [ $((0x$2 & 512)) != 0 ] && [ "$1" = 0 ] && [ $((0x$2 & 61440)) = 16384 ]; then
    :
  else
    [ -n "$_tw" ] || _tX="$4 is writable by group or others (mode $(printf %o $((0x$2 & 4095))), owner $3)"
    _tU=-; _tw=1
  fi
}
