"""Which lines of a server's log say something about the server, not about deploy's probes.

While deploy waits for SGLang it polls ``/health_generate`` (and reads ``/model_info`` or
``/server_info`` for the gate); the server logs each request, so the newest log line is most
often deploy's own poll — useless as a sign of progress ("Load weight begin", "Capture cuda
graph" are what an operator wants to see). Pure text logic, no I/O.
"""

from __future__ import annotations

import re

#: Endpoints deploy's own probes call on an SGLang server (and the stand-in).
PROBE_PATHS = frozenset(
    {
        "/health",
        "/health_generate",
        "/model_info",
        "/server_info",
        "/get_model_info",
        "/get_server_info",
    }
)
# Uvicorn's access log: `INFO:     127.0.0.1:57522 - "GET /health_generate HTTP/1.1" 503 ...`
_REQUEST = re.compile(r'"(?:GET|POST|HEAD) (?P<path>/[^ ?"]*)(?:\?[^ "]*)? HTTP/[0-9.]+"')


def is_probe_line(line: str) -> bool:
    """An access-log line for one of `PROBE_PATHS` (deploy's own polling)."""
    match = _REQUEST.search(line)
    return match is not None and match["path"].rstrip("/") in PROBE_PATHS


def newest_line(lines: list[str]) -> str:
    """The newest non-empty line that is not a probe's access-log line; "" if none."""
    for line in reversed(lines):
        if line.strip() and not is_probe_line(line):
            return line
    return ""
