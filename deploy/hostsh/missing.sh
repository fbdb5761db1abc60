# shellcheck shell=sh
# Inputs: _tP, _tM (check.sh).
#
# After `CHECK`: a missing interpreter is not found (exit 127), not created and then run.

[ -z "$_tM" ] || { printf '%s: not found\n' "$_tP" >&2; exit 127; }
