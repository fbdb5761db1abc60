"""Commands over the lock's channel: one login shell per host per run, however many commands.

Every exec starts the user's login shell (``.bashrc`` included: ~60-100 ms where it runs
``pyenv init``). The lock holds one such shell for the whole run anyway, so once the lock is
held it becomes a command loop (``deploy/hostsh/loop.sh``) that runs every later command: the
same one login shell as the bare ``connect + true`` floor. Framed by lengths, so code, stdin
and output may hold any bytes:

- client → host: ``RUN <code bytes> <stdin bytes> <timeout seconds>\\n``, the code, stdin,
  then ``END\\n``: a frame the stream ends inside (a cut link, a killed workstation) has no
  ``END`` and is never run, even if its code arrived whole.
- host → client: ``DONE <exit status> <stdout bytes> <stderr bytes>\\n``, stdout, stderr.
- ``CHECK`` instead of ``RUN``: an exit status other than 0 fails the session as a failed
  helper request does, so everything sent after it is skipped until ``CLEAR``: a commit
  record sent behind a run's checks is written only if they all passed, and the client waits
  once for all of it (`deploy.engine.verdicts`).

A command runs as an exec would: in a subshell of the user's shell, in the home directory,
with the login shell's umask, and without the lock's fd (a server it starts must never hold
the lock). ``timeout(1)`` bounds it on the host (exit 124) and the client waits `GRACE` beyond;
a host silent after that is lost, since the loop's framing can no longer be trusted.
"""

from __future__ import annotations

import json
import select
import time
from collections import deque
from typing import Any

import paramiko

from deploy import trace
from deploy.remote.calls import Call, CallFailed, NoHelper, SessionLost
from deploy.remote.transport import AFTER_EXIT, Channel, rest_after_exit

#: Seconds a timed command may overrun its own ``timeout(1)`` before the host counts as lost.
GRACE = 15.0


class Session:
    """The client side of ``loop.sh``, on the channel that holds the host's lock; not
    thread-safe, like `RemoteHost`. Requests (`call`, `send_run`) are sent without waiting and
    answered in order; `wait` collects every answer due in one round trip, `run` collects them
    with its own."""

    def __init__(self, channel: Channel | None, ops: dict[str, int] | None = None) -> None:
        """``channel`` None: what is sent is held (`held`) until one is `attach`ed (the lock
        puts its first requests in the exec's own command line, `deploy.remote.lock`)."""
        self._channel = channel
        self._held = bytearray()
        # Amortized appends and front deletions: an answer may carry a large file.
        self._buffer = bytearray()
        self.broken = False
        #: When the shell was first seen ended (its exit status in): bounds what is read after.
        self.ended_at: float | None = None
        self.ops = ops if ops is not None else {}
        self._pending: deque[Call] = deque()

    @property
    def channel(self) -> Channel:
        if self._channel is None:
            raise SessionLost("the session's channel is not started yet")
        return self._channel

    def held(self) -> bytes:
        """What was sent before a channel was attached, in order."""
        return bytes(self._held)

    def attach(self, channel: Channel) -> None:
        """Send on ``channel`` from now on (what was held is the caller's to deliver)."""
        self._channel = channel

    def _send(self, data: bytes | memoryview) -> None:
        """Send (or hold) ``data``; a failure breaks the session: its framing is lost.

        Large frames go as a memoryview: paramiko's sendall loops ``s = s[sent:]``, one packet
        (32 KiB) per turn, and a bytes slice copies the rest each time (a 100 MB write copied
        ~160 GB; tests/faults/test_hostile.py's 100 MB round trip timed out at 300 s).
        """
        if self.broken:
            raise SessionLost("the session was lost earlier in this run")
        self.ops["sent"] = self.ops.get("sent", 0) + len(data)
        if self._channel is None:
            self._held += data
            return
        try:
            self._channel.sendall(data)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.broken = True
            raise SessionLost(str(exc) or type(exc).__name__) from exc

    def call(self, args: dict[str, Any], payload: bytes = b"") -> Call:
        """Send one request to the host's file helper; do not wait for its answer."""
        head = json.dumps(args, sort_keys=True).encode()
        self._send(memoryview(b"CALL %d %d 0\n" % (len(head), len(payload)) + head + payload))
        call = Call(args)
        self._pending.append(call)
        self.ops["call"] = self.ops.get("call", 0) + 1
        return call

    def send_run(self, command: str, *, timeout: float, check: bool = False) -> Call:
        """Send a command without waiting (answered in turn, like a `call`); ``check``: as a
        ``CHECK`` (module docstring)."""
        call = self._command(b"CHECK" if check else b"RUN", command, b"", max(1, round(timeout)))
        self.ops["cmd"] = self.ops.get("cmd", 0) + 1
        return call

    def _command(self, verb: bytes, command: str, stdin: bytes, seconds: int) -> Call:
        """Send one ``RUN`` or ``CHECK`` frame (``seconds`` 0: no time limit)."""
        code = command.encode()
        head = b"%s %d %d %d\n" % (verb, len(code), len(stdin), seconds)
        self._send(memoryview(b"".join((head, code, stdin, b"END\n"))))  # one copy of stdin
        check = verb == b"CHECK"
        call = Call({"run": command}, command=True, check=check, timeout=seconds or None)
        self._pending.append(call)
        return call

    @trace.spanned("session.wait")
    def wait(self, timeout: float | None = None, *, counted: bool = False) -> None:
        """Collect every outstanding answer (one round trip, unless ``counted`` with another:
        the lock's, prefetch; none if nothing is outstanding).

        A ``CHECK`` that failed raises nothing: its sender reads it (`Call.failed_check`).

        Raises:
            CallFailed: the first request that failed (later ones were skipped on the host).
            NoHelper: the host could not start the helper.
            SessionLost: the channel closed, or no answer within ``timeout`` + `GRACE` (a
                command sent ahead: within its own time limit + `GRACE`, `Call.timeout`).
        """
        if not self._pending:
            return
        if self.broken:  # the framing is lost: nothing more can be read as an answer
            raise SessionLost("the session was lost earlier in this run")
        if not counted:
            self.ops["wait"] = self.ops.get("wait", 0) + 1
        self._collect(None if timeout is None else time.monotonic() + timeout + GRACE)

    def feed(self, data: bytes) -> None:
        """Answers read another way (`HostFiles.read_ahead`: an exec's output), to parse."""
        self._buffer += data

    def _collect(self, deadline: float | None) -> Call | None:
        """Read every pending answer; return the first ``CHECK`` that failed (None if none),
        cleared on the host (``CLEAR``) once seen, like a failed request (which raises)."""
        failed: Call | None = None
        checked: Call | None = None
        missing = False
        try:
            while self._pending:
                call = self._pending.popleft()
                limit = deadline
                if limit is None and call.timeout is not None:  # as `run` bounds its own
                    limit = time.monotonic() + call.timeout + GRACE
                header = self.read_line(limit)
                if call.command:
                    call.answer = self._command_answer(header, call, limit)
                    if call.failed_check and checked is None:
                        checked = call
                    continue
                if header == b"NOHELPER":
                    call.answer = {"ok": False, "error": "no python3 on the host"}
                    missing = True
                    continue
                parts = header.split()
                if len(parts) != 3 or parts[0] != b"ANS":
                    raise SessionLost(f"unexpected answer {header[:80]!r}")
                head = self._read_exactly(int(parts[1]), deadline)
                call.payload = self._read_exactly(int(parts[2]), deadline)
                call.answer = json.loads(head)  # a helper request: never a CHECK
                if not call.ok and failed is None and not call.skipped:
                    failed = call
        except SessionLost:
            self.broken = True
            raise
        except (paramiko.SSHException, OSError, EOFError, ValueError) as exc:
            self.broken = True
            raise SessionLost(str(exc) or type(exc).__name__) from exc
        if failed is not None or checked is not None:
            self._send(b"CLEAR 0 0 0\n")  # the host serves requests and commands again
        if missing:
            raise NoHelper("python3 is needed on the host for deploy's file operations")
        if failed is not None:
            raise CallFailed(failed)
        return checked

    def _command_answer(self, header: bytes, call: Call, deadline: float | None) -> dict[str, Any]:
        """A command's ``DONE`` line and what follows it (stdout: the call's payload)."""
        if header == b"SKIP":
            return {"ok": False, "skipped": True, "error": "skipped"}
        parts = header.split()
        if len(parts) != 4 or parts[0] != b"DONE":
            raise SessionLost(f"unexpected answer {header[:80]!r}")
        status, out_len, err_len = (int(p) for p in parts[1:])
        call.payload = self._read_exactly(out_len, deadline)
        stderr = self._read_exactly(err_len, deadline).decode("utf-8", "replace")
        answer: dict[str, Any] = {"ok": True, "status": status, "stderr": stderr}
        if call.check and status != 0:
            answer["error"] = f"a check sent earlier exited {status}"
        return answer

    def run(
        self, command: str, *, stdin: bytes = b"", timeout: float | None = None
    ) -> tuple[int, bytes, bytes, bool]:
        """Run ``command``; return (exit status, stdout, stderr, timed out). Outstanding
        answers are collected in the same round trip, first.

        Raises:
            CallFailed: an earlier request failed; the command was not run.
            SessionLost: the channel closed, or no answer within ``timeout`` + `GRACE`.
        """
        seconds = 0 if timeout is None else max(1, round(timeout))
        began = time.monotonic()
        call = self._command(b"RUN", command, stdin, seconds)
        self.ops["wait"] = self.ops.get("wait", 0) + 1
        checked = self._collect(None if timeout is None else began + seconds + GRACE)
        if checked is not None:  # the engine waits for its checks first: not expected
            raise CallFailed(checked)
        answer = call.answer or {}
        if call.skipped:
            self.broken = True
            raise SessionLost("the host skipped a command after no failure")
        status = int(answer["status"])
        # timeout(1) exits 124 when it stopped the command (137 if it had to KILL it).
        timed_out = (
            bool(seconds) and status in (124, 137) and (time.monotonic() - began >= seconds - 0.5)
        )
        return status, call.payload, str(answer["stderr"]).encode(), timed_out

    def _fill(self, deadline: float | None) -> None:
        while not self.channel.recv_ready():
            # The lock shell's own stderr (the helper's traceback or warning, say) is no
            # answer's: read it away before any select, since bytes left in it keep the
            # channel's pipe readable and the select would return at once, every wait spinning.
            if self.channel.recv_stderr_ready():
                self.channel.recv_stderr(1 << 16)
                continue
            if self.channel.closed or self.channel.exit_status_ready():
                # Its last answer may follow the status: read on for AFTER_EXIT in all, within
                # the deadline (a host trickling a byte at a time after it must not hold us).
                now = time.monotonic()
                self.ended_at = self.ended_at or now
                left = self.ended_at + AFTER_EXIT - now
                if deadline is not None:
                    left = min(left, deadline - now)
                rest = rest_after_exit(self.channel, left)[0] if left > 0 else b""
                if not rest:
                    raise SessionLost("the host's shell ended")
                self._buffer += rest
                return
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise SessionLost("no answer in time")
            select.select([self.channel], [], [], wait)
        chunk = self.channel.recv(1 << 20)
        if not chunk:
            raise SessionLost("the host's shell ended")
        self._buffer += chunk

    def read_line(self, deadline: float | None) -> bytes:
        searched = 0
        while (end := self._buffer.find(b"\n", searched)) < 0:
            searched = len(self._buffer)
            self._fill(deadline)
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _read_exactly(self, size: int, deadline: float | None) -> bytes:
        while len(self._buffer) < size:
            self._fill(deadline)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data
