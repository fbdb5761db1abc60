# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# The compile check without a cache (deploy.checks.compile.compile_command and
# compile_stdin_command). Inputs: _tY the interpreter, _tD the file (or the name of the bytes
# on stdin), _tF the file to open for an untrusted interpreter (empty: stdin), _tC the Python
# code a trusted interpreter runs on _tD, _tO the code an untrusted one runs on stdin.

. ./found.sh
. ./guard.sh
[ -n "$_tP" ] && [ -n "$_tX" ] || exec "$_tE" -B -I -S -c "$_tC" "$_tD"
. ./owner.sh
