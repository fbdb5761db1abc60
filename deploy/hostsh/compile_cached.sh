# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2086
# The cached compile check (deploy.checks.compile.compile_command with a cache; the module
# docstring gives the rule). Inputs: c the cache directory, p the file, _tY the interpreter
# as configured, _tC the caching Python code (_CACHING_SCRIPT), _tO the code an untrusted
# interpreter runs on the file's bytes. i: the interpreter as the shell finds it.
#
# Not sent ahead (DEPLOY_SENT_AHEAD unset), the check is the interpreter itself: the key, the
# lookup, the compile and the record in the one process compiling needs anyway (issue 17).
# Its exit status and stderr are the interpreter's own. Sent ahead it never compiles: k, the
# file's sha256 now; with no record for it, "not recorded" at once (exit 3); else f, the
# interpreter's identity (stat -L of the resolved binary and of each libpython found), empty
# unless the binary is ELF and either large enough to hold the interpreter (1000000 bytes,
# _STATIC_SIZE) or has a libpython beside it, compared with the record. Builtins only beyond
# sha256sum, readlink, head and stat. The literals here (DEPLOY_SENT_AHEAD, exit 3, the
# messages, 1000000) are deploy.checks.compile's constants (tests/unit/test_shellcheck.py).
# SC2086: `set -- $f` splits stat's lines on purpose, under set -f.

k=; f=; r=
case $_tY in /*) i=$_tY ;; *) i=$(command -v "$_tY" 2>/dev/null) ;; esac
[ -n "${DEPLOY_SENT_AHEAD-}" ] || { _tP=$i
. ./guard.sh
[ -n "$_tP" ] && [ -n "$_tX" ] || exec "$_tE" -B -I -S -c "$_tC" "$p" "$c" "$i"
_tF=$p; _tD=$p
. ./owner.sh
}
k=$(sha256sum < "$p" 2>/dev/null) && k=${k%% *}
if [ -z "$k" ] || [ ! -f "$c/$k" ]; then echo 'deploy-compile: not recorded (a check sent ahead compiles nothing)' >&2; exit 3; fi
if [ -n "$i" ] && i=$(readlink -f -- "$i" 2>/dev/null) \
  && case "$(head -c 4 -- "$i" 2>/dev/null)" in ?ELF) true ;; *) false ;; esac; then
  set -- "$i"
  for l in "${i%/*}"/../lib/libpython*.so* "${i%/*}"/../lib64/libpython*.so* /usr/lib/libpython*.so* /usr/lib64/libpython*.so* /usr/lib/*-linux-gnu/libpython*.so*; do [ -f "$l" ] && set -- "$@" "$l"; done
  if f=$(stat -L -c '%s:%d:%i:%Y:%Z' -- "$@" 2>/dev/null); then
    [ "$#" -gt 1 ] || [ "${f%%:*}" -gt 1000000 ] || f=
    set -f; set -- $f; set +f; f="$*"
  else f=; fi
fi
[ -n "$f" ] && IFS= read -r r < "$c/$k"
if [ -n "$r" ] && [ "$r" = "$f" ]; then printf '%s %s\n' 'deploy-compile: reused' "$k"; exit 0; fi
echo 'deploy-compile: not recorded (a check sent ahead compiles nothing)' >&2; exit 3
