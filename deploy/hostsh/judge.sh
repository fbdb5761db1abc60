# shellcheck shell=sh
# Part of the interpreter trust check (deploy.checks.interpreter; check.sh, trust.sh).
#
# ``_tj UID HEXMODE OWNER NAME``: one ``stat -c '%u %f %U %n'`` line of those paths, judged
# against ``_tI`` (the login uid). Sets ``_tX`` (the first reason it fails) and ``_tU``/``_tN``:
# the one other user whose paths these are, whom a root caller may run the interpreter as
# (``-`` when there is none to pick: two other owners, or a path anyone may write, which is
# then the reason given).

_tj() {
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
