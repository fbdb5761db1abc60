# shellcheck shell=sh
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2086
# An untrusted interpreter _tP compiles the bytes of _tF (opened here, by root, and checked to
# be the very file named, no symbolic link) or, _tF empty, of this shell's stdin, run as its
# owner (run_as.sh): an empty environment but PATH, stdout discarded, stderr read through a
# pipe. _tO: the Python code it runs, _tD: the name given to compile(). Never returns.
# SC2086: $_tS is a command prefix (setpriv --reuid=...), split on purpose.

. ./run_as.sh
if [ -n "$_tF" ]; then
exec 5<"$_tF"
if [ -h "$_tF" ] || ! [ /proc/self/fd/5 -ef "$_tF" ]; then
  printf 'deploy: %s changed while it was opened for the check (a symbolic link?)\n' "$_tF" >&2; exit 1
fi
else
exec 5<&0
fi
_te=$(exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin $_tS "$_tP" -B -I -S -c "$_tO" "$_tD" <&5 5<&- 2>&1 >/dev/null); _tr=$?
[ -z "$_te" ] || printf '%s\n' "$_te" >&2
exit "$_tr"
