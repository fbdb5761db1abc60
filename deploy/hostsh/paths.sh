# shellcheck shell=sh
# Part of the interpreter trust check (deploy.checks.interpreter; check.sh).
#
# After the caller's ``realpath``: ``_tR`` and ``_tG``, ``_tP`` and ``_tH`` resolved. Root
# starts a trusted interpreter as ``_tR`` (the path judged, with no symlink left to follow
# through a directory nobody judged), so a ``pyvenv.cfg`` that ``_tR`` would read must be
# ``_tV``, the one whose ``home`` was judged; else ``_tX`` says so. So does a ``._pth`` file
# beside the interpreter (``python3.11._pth``: CPython 3.11 takes sys.path, the stdlib
# included, from its lines on Linux too; they are not judged). Appends
# to the positional parameters every path the rule checks (module docstring), for the
# caller's one ``stat``. Builtins only (globs; ``[ -e ]`` drops what does not exist). A
# directory already listed ends a chain (its parents are listed too): each line of the
# caller's ``stat`` costs its shell ~50 us to judge, and the resolved path mostly shares the
# given one's directories.

_ts=/ _tq=
for _tk in "${_tR%/*}" "${_tR%/*/*}"; do
  if [ -n "$_tk" ] && [ -f "$_tk/pyvenv.cfg" ]; then _tq=$_tk/pyvenv.cfg; break; fi
done
if [ -n "$_tq" ] && ! [ "$_tq" -ef "$_tV" ]; then _tX="$_tR would read $_tq, not ${_tV:-no pyvenv.cfg}"; fi
for _tk in "$_tP._pth" "$_tR._pth"; do [ -e "$_tk" ] && _tX="$_tk replaces sys.path (not judged)"; done
for _tq in "$_tP" "$_tR" "$_tH" "$_tG"; do
  while [ -n "$_tq" ]; do
    case $_ts in *"
$_tq
"*) break ;; esac
    set -- "$@" "$_tq"; _ts="$_ts
$_tq
"; _tq=${_tq%/*}
  done
done
[ -n "$_tV" ] && set -- "$@" "$_tV"
for _tq in "${_tR%/*/*}" "${_tG%/*}"; do
  for _tl in "$_tq"/lib "$_tq"/lib64; do
    [ -n "$_tq" ] && [ -d "$_tl" ] || continue
    set -- "$@" "$_tl"
    for _tk in "$_tl"/python3*; do
      [ -d "$_tk" ] || continue
      set -- "$@" "$_tk"
      for _tm in "$_tk"/encodings "$_tk"/lib-dynload; do [ -d "$_tm" ] && set -- "$@" "$_tm"; done
    done
  done
done
