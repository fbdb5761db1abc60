# shellcheck shell=sh
# shellcheck disable=SC2086,SC2094
# The loop the lock script (lock.sh) becomes once the lock is held: it serves the run's
# commands and the file helper's requests (deploy.remote.session speaks its protocol).
# Inputs: _dS _dU _dA _dZ.
#
# The loop the lock script ``exec``s into once the lock is held (POSIX sh; ``head -c`` reads
# exactly the bytes asked for from a pipe). ``$_dS`` is the state directory, ``$_dU`` the
# login shell's umask, ``$_dA`` the file helper's source, run on python3. Each command
# gets its own scratch files in the 0700 state directory (numbered; all removed when the
# loop ends), so a process an earlier command left running
# with its output still open writes to a file nobody reads any more, never into a later
# answer. Process starts are the loop's cost (~0.5 ms each on the host's CPU), so empty stdin
# and empty stderr take none: ``head`` only for bytes sent, ``wc`` only for a non-empty file,
# ``rm`` only when there are scratch files (the glob is the shell's own). ``$_dF``: a request or
# a ``CHECK`` failed and the client has not seen it yet (``FAIL`` tells the helper the same).
# Every ``RUN``/``CHECK`` frame ends with an ``END`` line after its command and stdin: ``head``
# returns short, without an error, when the stream ends inside a frame (the connection cut, the
# workstation killed between two SSH packets, the relay killed), and a command cut short
# (``rm -rf /srv/x/cache`` arriving as ``rm -rf /srv/x/``) must never run: no ``END``, no run.
# ``$_dZ``: requests the client sent ahead inside the exec's command line
# (`deploy.remote.lock`), which a relay in the background (``cat``) writes, then the
# channel's stdin, into a fifo made with the helper's that becomes the loop's stdin: the loop
# and the helper read it as they read the channel. When the channel's stdin ends, the relay
# ends and so does the loop; when the shell ends first, sshd closes the relay's stdin (the
# relay holds neither the lock nor stdout nor stderr, so the channel closes with the shell).
# No open of a fifo ever waits for the other side: the shell first opens each one read-write
# (an anchor, fds 3 and 4, which Linux never blocks on), then its own end, then starts the
# process of the other end, which opens its end over the inherited anchor; only then the
# shell drops the anchor. So a relay or helper that dies before it opened its end (killed,
# a redirection failing) leaves the shell an end of file or a broken pipe, never an open
# that blocks forever with the lock held. A fork that fails ends bash and dash alike, and so
# does an open that fails (``|| exit 1``: bash, unlike dash, goes on after a failed ``exec``
# redirection, to an open without its anchor; each end opens in its anchor's ``exec``). The
# fifos are removed when the loop ends, with its scratch files (not once they are open: the
# shell no longer knows when the other end has opened its), and by the next loop if this
# one was killed; they are 0600 in the 0700 state directory, and the lock is held. No
# fifo (or no helper): ``NORELAY``, and the client sends them on stdin. ``READY``: the loop
# serves from here on.
# SC2086: the DONE line's counts are unquoted on purpose (wc -c pads on some systems).
# SC2094: the fifos are read and written by design.

_dn=0; set -- "$_dS"/.session.*; [ -e "$1" ] && rm -f -- "$@"
_dT=; command -v timeout >/dev/null 2>&1 && _dT=1
_dK=; _dF=; _dY=/usr/bin/python3
[ -x "$_dY" ] || _dY=/usr/local/bin/python3
[ -x "$_dY" ] || { _dY=$(command -v python3 2>/dev/null); [ -x "$_dY" ] || _dY=; }
set -- "$_dS/.helper.go" "$_dS/.helper.ack"; [ -n "$_dZ" ] && set -- "$@" "$_dS/.relay"
for _dq; do
  { [ -e "$_dq" ] || [ -h "$_dq" ]; } && rm -f -- "$_dq"
done
if [ -n "$_dY" ] && { mkfifo -m 600 "$@" 2>/dev/null || { [ -p "$1" ] && [ -p "$2" ]; }; }; then
  if [ -n "$_dZ" ] && [ -p "$3" ]; then
    exec 5<&0 4<>"$3" 0<"$3" || exit 1
    { exec >"$3" 4<&- || exit 1; printf %s "$_dZ"; exec cat; } 9>&- 2>/dev/null >/dev/null 0<&5 5<&- &
    exec 4<&- 5<&-; _dZ=
  fi
  exec 6<&0 3<>"$1" 4<>"$2" 7>"$1" 8<"$2" || exit 1
  "$_dY" -I -S -c "$_dA" 3 4 0<&6 3<"$1" 4>"$2" 6<&- 7>&- 8<&- 9>&- &
  exec 3<&- 4<&- 6<&-; _dK=1
fi
[ -z "$_dZ" ] || { _dZ=; echo NORELAY; }
echo READY
while read -r _dv _dc _di _dt; do
  if [ "$_dv" = CALL ]; then
    if [ -z "$_dK" ]; then head -c $((_dc + _di)) >/dev/null; printf 'NOHELPER\n'; continue; fi
    printf '%s %s\n' "$_dc" "$_di" >&7; read -r _dk <&8 || break
    [ "$_dk" = 0 ] || _dF=1; continue
  fi
  if [ "$_dv" = CLEAR ]; then _dF=; [ -n "$_dK" ] && echo CLEAR >&7; continue; fi
  case $_dv in RUN|CHECK) ;; *) break ;; esac
  _dx=$(head -c "$_dc"; echo .); _dx=${_dx%.}
  _dn=$((_dn + 1)); _dI="$_dS/.session.$_dn.in"; _dO="$_dS/.session.$_dn.out"; _dE="$_dS/.session.$_dn.err"
  if [ "$_di" -gt 0 ]; then head -c "$_di" >"$_dI"; else : >"$_dI"; fi
  IFS= read -r _dz || break; [ "$_dz" = END ] || break
  if [ -n "$_dF" ]; then printf 'SKIP\n'; continue; fi
  if [ "$_dt" != 0 ] && [ -n "$_dT" ]; then
    ( umask "$_dU"; exec timeout -k 5 "$_dt" "${SHELL:-/bin/sh}" -c "$_dx" ) <"$_dI" >"$_dO" 2>"$_dE" 7>&- 8>&- 9>&-
  else
    ( umask "$_dU"; eval "$_dx" ) <"$_dI" >"$_dO" 2>"$_dE" 7>&- 8>&- 9>&-
  fi
  _dr=$?
  if [ "$_dr" != 0 ] && [ "$_dv" = CHECK ]; then _dF=1; [ -n "$_dK" ] && echo FAIL >&7; fi
  _do=0; [ -s "$_dO" ] && _do=$(wc -c <"$_dO")
  _de=0; [ -s "$_dE" ] && _de=$(wc -c <"$_dE")
  printf 'DONE %s %s %s\n' "$_dr" $_do $_de
  if [ "$_do" != 0 ] || [ "$_de" != 0 ]; then cat "$_dO" "$_dE"; fi
done
[ -n "$_dK" ] || set --
if [ "$_dn" -gt 0 ]; then set -- "$@" "$_dS"/.session.*; fi
if [ "$#" -gt 0 ]; then rm -f -- "$@" 2>/dev/null; fi
