"""File helper that runs ON THE HOST: every read and write through file descriptors
(`deploy.hostpy.fileagent_ops`).

Started once per run by the lock's shell (``deploy/hostsh/loop.sh``) as ``python3 -I -S -c
SOURCE 3 4``, it serves framed requests for the whole run: a request costs no process start,
and requests sent without waiting are served in order (an intent appended and fsynced is
durable before the write that follows it).

Wire format (``serve``): the shell loop reads ``CALL <hlen> <blen>`` and passes the two
numbers on the ``go`` pipe; the helper reads the JSON header and the payload from stdin, writes
``ANS <hlen> <blen>\\n`` + JSON + payload to stdout and a status line (``0`` ok, ``1`` failed)
on the ``ack`` pipe. After a failure every later request is answered ``skipped`` until a
``CLEAR`` line comes on ``go``: a failed write must not be followed by its ``done`` record, nor
by a restart the client sent before it saw the failure. A ``FAIL`` line (a ``CHECK`` command of
the shell loop failed) counts as a failed request: the commit sent behind it is skipped.
"""

import errno as errnomod
import os
import sys
from json import dumps, loads

# host-program: part (deploy.hostpy.program)
from deploy.hostpy.fileagent_ops import (
    Refused,
    append,
    mkdir,
    read,
    remove,
    remove_temps,
    write,
    write_all,
)


def handle(header, payload, reads_only=False):
    """One request: (answer header, answer payload). Errors become ``{"error": ...}``."""
    try:
        args = loads(header.decode("utf-8"))
        op = args.get("op")
        if op == "read":
            answer, body = read(args)
        elif op in OPERATIONS and not reads_only:
            answer, body = OPERATIONS[op](args, payload), b""
        else:
            raise Refused("only reads without the lock" if reads_only else f"unknown op {op!r}")
        answer["ok"] = True
        return answer, body
    except Refused as exc:
        return {"ok": False, "error": str(exc), "refused": True}, b""
    except OSError as exc:
        name = errnomod.errorcode.get(exc.errno or 0, "")
        text, where = exc.strerror or str(exc), str(exc.filename or "")
        return {"ok": False, "error": text, "errno": name, "file": where}, b""
    except Exception as exc:  # a bad request must not end the run's helper
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, b""


OPERATIONS = dict(write=write, append=append, mkdir=mkdir, remove=remove, remove_temps=remove_temps)


def _read_exactly(fd, size):
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("stdin ended inside a request")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_payload(header, size):
    """A request's payload: ``size`` bytes from stdin. (The fault suite's helper, built by
    tests/faults/helper_hook.py and never shipped, replaces this function to stop inside a
    request; the helper that runs on hosts has no such hook.)"""
    return _read_exactly(0, size)


def serve(go_fd, ack_fd):
    """Serve requests until the ``go`` pipe ends (the run's shell loop ended); the process
    exits then, which closes the journals `append` kept open (each fsynced as it asked)."""
    go = os.fdopen(go_fd, "rb")
    failed = False
    for line in go:
        parts = line.split()
        if parts[:1] == [b"CLEAR"]:
            failed = False
            continue
        if parts[:1] == [b"FAIL"]:  # a check the shell ran failed: skip as after our own
            failed = True
            continue
        header = _read_exactly(0, int(parts[0]))
        payload = read_payload(header, int(parts[1]))
        if failed:
            answer, body = {"ok": False, "skipped": True, "error": "skipped"}, b""
        else:
            answer, body = handle(header, payload)
            failed = not answer.get("ok")
        text = dumps(answer).encode("utf-8")
        write_all(1, b"ANS %d %d\n" % (len(text), len(body)) + text + body)
        write_all(ack_fd, b"1\n" if failed else b"0\n")


def once():
    """Answer the ``read`` requests framed on stdin (``CALL <hlen> <blen> 0`` lines), then exit:
    a run without the lock (`deploy.remote.hostfiles.HostFiles.read_ahead`), nothing but reads."""
    stdin = os.fdopen(0, "rb")
    for line in stdin:
        parts = line.split()
        header = stdin.read(int(parts[1]))
        stdin.read(int(parts[2]))
        answer, body = handle(header, b"", reads_only=True)
        text = dumps(answer).encode("utf-8")
        write_all(1, b"ANS %d %d\n" % (len(text), len(body)) + text + body)


if __name__ == "__main__":
    if sys.version_info < (3, 8):  # noqa: UP036  # the host's interpreter, not ours
        sys.exit("deploy's file helper needs Python 3.8 or later")
    if sys.argv[1] == "once":
        once()
    else:
        serve(int(sys.argv[1]), int(sys.argv[2]))
