"""deploy.checks.loglines: the wait's "newest log line" is the server's, not deploy's own poll."""

from __future__ import annotations

import pytest

from deploy.checks.loglines import is_probe_line, newest_line

ACCESS = '[2026-11-30 20:37:32] INFO:     127.0.0.1:57522 - "{method} {path} HTTP/1.1" 503 Service Unavailable'


@pytest.mark.parametrize(
    "path",
    [
        "/health",
        "/health_generate",
        "/model_info",
        "/server_info",
        "/get_server_info",
        "/health?x=1",
    ],
)
def test_probe_requests_are_recognised(path: str) -> None:
    assert is_probe_line(ACCESS.format(method="GET", path=path))


@pytest.mark.parametrize(
    "line",
    [
        ACCESS.format(method="POST", path="/generate"),
        ACCESS.format(method="GET", path="/healthz-of-something-else"),
        "[2026-11-30 20:37:29 TP0] Load weight begin. avail mem=94.61 GB",
        "the word /health in a message is not a request",
    ],
)
def test_other_lines_are_not_probes(line: str) -> None:
    assert not is_probe_line(line)


def test_newest_line_skips_probes_and_blank_lines() -> None:
    lines = [
        "[2026-11-30 20:37:31 TP0] Capture cuda graph begin. This can take up to several minutes.",
        ACCESS.format(method="GET", path="/health_generate"),
        "",
        ACCESS.format(method="GET", path="/model_info"),
    ]
    assert newest_line(lines) == lines[0]
    assert newest_line(lines[1:]) == ""
    assert newest_line([]) == ""
