# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# Input: _tP, the interpreter (absolute). Outputs: _tX (empty when trusted), _tU/_tN
# (judge.sh), _tR/_tG (resolved), _tM (missing when judged).
#
# A whole check, for a command of its own (`deploy.checks.compile`): ``_tP`` in; ``_tX``
# empty when trusted; else ``_tU``/``_tN`` as `JUDGE`. One ``realpath`` and one ``stat``.
# ``_tM`` set: trusted only because the interpreter did not exist when judged (a missing
# path under a sticky ``/tmp`` is anyone's to create before the exec): the caller says
# "not found", exit 127, as the exec would have (`MISSING`).
# ``_tI``: the login uid (``[ -O / ]``, else ``id -u``).

. ./venv.sh
. ./judge.sh
_tR=; _tG=; _tM=
if [ -z "$_tX" ]; then
  if [ -n "$_tH" ]; then _tx=$(realpath -m -- "$_tP" "$_tH"); else _tx=$(realpath -m -- "$_tP"); fi
  _tR=${_tx%%'
'*}; [ -n "$_tH" ] && _tG=${_tx#*'
'}
  case $_tR$_tG in *'
'*) _tX="a resolved path of $_tP holds a line break" ;; esac
fi
if [ -z "$_tX" ]; then
  set -- /
. ./paths.sh
  _tL=$(stat -c '%u %f %U %n' -- "$@" 2>/dev/null)
  if [ -O / ]; then _tI=${_tL%% *}; else _tI=$(id -u); fi
  while read -r _tu _tf _to _tn; do [ -n "$_tu" ] && _tj "$_tu" "$_tf" "$_to" "$_tn"; done <<_tEOF
$_tL
_tEOF
  case "$_tL
" in *" $_tR
"*) ;; *) [ -n "$_tX" ] || _tM=1 ;; esac
fi
