# shellcheck shell=sh
# shellcheck disable=SC2034
# Inputs: _tP, _tX, _tU, _tN (check.sh). Output: _tS.
#
# After `CHECK` found the interpreter untrusted, in a command that root runs: sets ``_tS`` to
# how to start it as ``_tN`` (uid ``_tU``) — ``setpriv`` with that user's groups, else
# ``runuser`` — or prints one line on stderr and exits `REFUSED`. A caller that is not root
# runs it as itself (``_tS`` empty): it has no one to drop to, and its own files are what
# the interpreter's owner could reach.

_tS=
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
