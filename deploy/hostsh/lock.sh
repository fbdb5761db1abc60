# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# The per-host lock (deploy.remote.lock): judges state_dir (trust.sh), takes state_dir/lock
# with flock(1), reports the holder it replaces and every run kept on the host (scan.sh), then
# becomes the command loop (loop.sh) for the rest of the run. One exec, one login shell.
#
# Inputs, quoted assignments that deploy.remote.lock puts before this text:
#   _dS  state_dir            _dA  the file helper's source   _dH  the holder's JSON
#   _dZ  requests sent ahead in the command line (may be empty)
# Answers (first line): LOCKED<tab>previous holder, BUSY<tab>holder (exit 75),
# UNTRUSTED<tab>path<tab>why (73), NOFLOCK (71), NOSTATE ... (70, 72).

_dU=$(umask); umask 077
. ./trust.sh
command -v flock >/dev/null 2>&1 || { echo "NOFLOCK"; exit 71; }
exec 9>>"$_dS/lock" || { _dM=$( (: >>"$_dS/lock") 2>&1); echo "NOSTATE cannot open $_dS/lock: ${_dM##*: }"; exit 72; }
if flock -w 1 9; then
  _dP=; IFS= read -r _dP 2>/dev/null <"$_dS/lock"
  printf '%s\n' "$_dH" > "$_dS/lock"
  printf 'LOCKED\t%s\n' "$_dP"
. ./scan.sh
. ./loop.sh
else
  printf 'BUSY\t%s\n' "$(cat "$_dS/lock" 2>/dev/null)"
  exit 75
fi
