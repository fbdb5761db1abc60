# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2034
# Before a command that must run as root or not at all (deploy's process agent): the
# interpreter _tY is judged (check.sh) when the session is root's; untrusted, one line on
# stderr and exit 77 (deploy.checks.interpreter.REFUSED). _tE: the path to start it by
# (the resolved path judged). deploy.checks.interpreter.root_only_if_trusted appends the
# command, which starts "$_tE".

. ./found.sh
_tR=
if [ -n "$_tP" ] && [ -O / ]; then
. ./check.sh
if [ -n "$_tX" ]; then echo "deploy: refusing to run $_tP as root: $_tX" >&2; exit 77; fi
. ./missing.sh
fi
_tE=${_tR:-$_tP}; [ -n "$_tE" ] || _tE=$_tY
