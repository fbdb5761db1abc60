"""Commands over the lock's channel: one login shell per host per run, however many commands.

Every exec starts the user's login shell on the host (``.bashrc`` included: ~60-100 ms where it
runs ``pyenv init``, and CPU the host's other work competes for). The lock already needs one
such shell for the whole run — it holds the flock — so after taking the lock that shell becomes
a small command loop (`LOOP`) and every later command of the run is sent to it instead of to a
new exec: the compile check, the service agent, systemctl. A run then pays one login shell per
host, the same as the bare ``connect + true`` floor in docs/performance.md.

The protocol is framed by lengths, so a command's code, stdin and output may hold any bytes:

- client → host: ``RUN <code bytes> <stdin bytes> <timeout seconds>\\n`` then the code, then stdin.
- host → client: ``DONE <exit status> <stdout bytes> <stderr bytes>\\n`` then stdout, then stderr.

Each command runs the way an exec would run it: in a subshell of the user's shell (its
environment from ``.bashrc`` included), in the home directory, with the umask the login shell
had (the lock script's own ``umask 077`` is for its state files only), stdin from the bytes
sent, and with the lock's file descriptor closed — a server started by a command must never
hold the host's lock after the run. With a timeout the host bounds the command itself with
``timeout(1)`` (exit 124, as a timed-out exec would be reported), and the client waits a grace
period beyond it; a host that does not answer then is treated as lost, because the loop's
framing can no longer be trusted.
"""

from __future__ import annotations

import select
import time

import paramiko

#: The loop the lock script ``exec``s into once the lock is held (POSIX sh; ``head -c`` reads
#: exactly the bytes asked for from a pipe). ``$_dS`` is the state directory, ``$_dU`` the
#: login shell's umask. Each command gets its own scratch files in the 0700 state directory
#: (numbered; all removed when the loop ends), so a process an earlier command left running
#: with its output still open writes to a file nobody reads any more, never into a later
#: answer. Process starts are the loop's cost (~0.5 ms each on the host's CPU), so empty stdin
#: and empty stderr take none: ``head`` only for bytes sent, ``wc`` only for a non-empty file,
#: ``rm`` only when there are scratch files (the glob is the shell's own).
LOOP = r"""_dn=0; set -- "$_dS"/.session.*; [ -e "$1" ] && rm -f -- "$@"
_dT=; command -v timeout >/dev/null 2>&1 && _dT=1
while read -r _dv _dc _di _dt; do
  [ "$_dv" = RUN ] || break
  _dx=$(head -c "$_dc"; echo .); _dx=${_dx%.}
  _dn=$((_dn + 1)); _dI="$_dS/.session.$_dn.in"; _dO="$_dS/.session.$_dn.out"; _dE="$_dS/.session.$_dn.err"
  if [ "$_di" -gt 0 ]; then head -c "$_di" >"$_dI"; else : >"$_dI"; fi
  if [ "$_dt" != 0 ] && [ -n "$_dT" ]; then
    ( umask "$_dU"; exec timeout -k 5 "$_dt" "${SHELL:-/bin/sh}" -c "$_dx" ) <"$_dI" >"$_dO" 2>"$_dE" 9>&-
  else
    ( umask "$_dU"; eval "$_dx" ) <"$_dI" >"$_dO" 2>"$_dE" 9>&-
  fi
  _dr=$?
  _do=0; [ -s "$_dO" ] && _do=$(wc -c <"$_dO")
  _de=0; [ -s "$_dE" ] && _de=$(wc -c <"$_dE")
  printf 'DONE %s %s %s\n' "$_dr" $_do $_de
  if [ "$_do" != 0 ] || [ "$_de" != 0 ]; then cat "$_dO" "$_dE"; fi
done
if [ "$_dn" -gt 0 ]; then rm -f -- "$_dS"/.session.*; fi
"""

#: Seconds a timed command may overrun its own ``timeout(1)`` before the host counts as lost.
GRACE = 15.0


class SessionLost(Exception):
    """The loop stopped answering or answered out of frame; the channel cannot be reused."""


class Session:
    """The client side of `LOOP`, on the channel that holds the host's lock.

    Not thread-safe, like `RemoteHost`: one command at a time, each answered before the next.
    """

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel
        self._buffer = b""
        self.broken = False

    def run(
        self, command: str, *, stdin: bytes = b"", timeout: float | None = None
    ) -> tuple[int, bytes, bytes, bool]:
        """Run ``command``; return (exit status, stdout, stderr, timed out).

        Raises:
            SessionLost: the channel closed, or no answer within ``timeout`` + `GRACE`.
        """
        if self.broken:
            raise SessionLost("the session was lost earlier in this run")
        code = command.encode()
        seconds = 0 if timeout is None else max(1, round(timeout))
        began = time.monotonic()
        try:
            self.channel.sendall(
                b"RUN %d %d %d\n" % (len(code), len(stdin), seconds) + code + stdin
            )
            deadline = None if timeout is None else began + seconds + GRACE
            header = self._read_line(deadline)
            parts = header.split()
            if len(parts) != 4 or parts[0] != b"DONE":
                raise SessionLost(f"unexpected answer {header[:80]!r}")
            status, out_len, err_len = (int(p) for p in parts[1:])
            out = self._read_exactly(out_len, deadline)
            err = self._read_exactly(err_len, deadline)
        except SessionLost:
            self.broken = True
            raise
        except (paramiko.SSHException, OSError, EOFError, ValueError) as exc:
            self.broken = True
            raise SessionLost(str(exc) or type(exc).__name__) from exc
        # timeout(1) exits 124 when it stopped the command (137 if it had to KILL it).
        timed_out = (
            bool(seconds) and status in (124, 137) and (time.monotonic() - began >= seconds - 0.5)
        )
        return status, out, err, timed_out

    def _fill(self, deadline: float | None) -> None:
        while not self.channel.recv_ready():
            ended = self.channel.closed or self.channel.exit_status_ready()
            if ended and not self.channel.recv_ready():
                raise SessionLost("the host's shell ended")
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise SessionLost("no answer in time")
            select.select([self.channel], [], [], wait)
        chunk = self.channel.recv(1 << 20)
        if not chunk:
            raise SessionLost("the host's shell ended")
        self._buffer += chunk

    def _read_line(self, deadline: float | None) -> bytes:
        while b"\n" not in self._buffer:
            self._fill(deadline)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _read_exactly(self, size: int, deadline: float | None) -> bytes:
        while len(self._buffer) < size:
            self._fill(deadline)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data
