# shellcheck shell=sh
# Part of the interpreter trust check (deploy.checks.interpreter; check.sh).
#
# Before the caller's ``realpath``: ``_tP``, the interpreter (absolute), gives ``_tV`` — the
# ``pyvenv.cfg`` Python would read (``_tP``'s directory, else the one above) — and ``_tH``, its
# first ``home`` value: CPython's getpath stops at the first (3.11 checked: with two ``home``
# lines its stdlib came from the first; tests/unit/test_interpreter_attacks.py), with spaces,
# tabs, CR, VT and FF stripped around key and value as ``str.strip`` strips them. ``_tX``: a
# reason already (a relative path, a line break). Builtins only.

_tX=; _tV=; _tH=; _tU=; _tN=; _tw=
case $_tP in /*) ;; *) _tX="$_tP is not an absolute path" ;; esac
case $_tP in *'
'*) _tX="the interpreter's path holds a line break" ;; esac
for _tq in "${_tP%/*}" "${_tP%/*/*}"; do
  if [ -n "$_tq" ] && [ -f "$_tq/pyvenv.cfg" ]; then _tV=$_tq/pyvenv.cfg; break; fi
done
if [ -n "$_tV" ]; then
  while IFS= read -r _tl || [ -n "$_tl" ]; do
    case $_tl in *=*) ;; *) continue ;; esac
    _tk=${_tl%%=*}; _tk=${_tk#"${_tk%%[! 	]*}"}; _tk=${_tk%"${_tk##*[! 	]}"}
    case $_tk in [Hh][Oo][Mm][Ee]) ;; *) continue ;; esac
    _tH=${_tl#*=}; _tH=${_tH#"${_tH%%[! 	]*}"}; _tH=${_tH%"${_tH##*[! 	]}"}; break
  done <"$_tV" 2>/dev/null
  case $_tH in /*) ;; *) _tX="$_tV names no absolute home ($_tH)" ;; esac
fi
