# shellcheck shell=sh
# _tP: the interpreter _tY (as configured) as the shell would run it (empty: not found).

case $_tY in /*) _tP=$_tY ;; *) _tP=$(command -v "$_tY" 2>/dev/null) ;; esac
