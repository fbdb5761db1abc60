"""Every connection failure is one line of ours: cause and fix, no paramiko wording."""

from __future__ import annotations

import errno
import socket

import paramiko
import pytest

from deploy.remote.sshauth import Attempt, describe

TRY = Attempt(name="gpu-1", target="10.0.0.5:22", user="deploy", timeout=10, keys=("/k",))

CASES = [
    (socket.gaierror(-2, "Name or service not known"), "cannot resolve 10.0.0.5 (DNS"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
    (paramiko.ssh_exception.NoValidConnectionsError({("h", 22): OSError()}), "refused"),
    (TimeoutError(), "no answer within 10 s"),
    (TimeoutError("timed out"), "raise connect_timeout"),
    (paramiko.SSHException("Error reading SSH protocol banner"), "no SSH server answered"),
    (paramiko.SSHException("No existing session"), "no SSH server answered"),
    (paramiko.SSHException("No authentication methods available"), "--private-key"),
    (paramiko.AuthenticationException("Authentication failed."), "refused login as deploy"),
    (paramiko.BadAuthenticationType("Bad authentication type", ["publickey"]), "use a key"),
    (paramiko.SSHException("Incompatible ssh peer (no acceptable host key)"), "in common"),
    (EOFError(), "closed the connection during the handshake"),
    (paramiko.SSHException("something new"), "handshake failed (SSHException)"),
]


@pytest.mark.parametrize(("exc", "expected"), CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_each_failure_is_one_line_with_cause_and_fix(exc: BaseException, expected: str) -> None:
    message = describe(exc, TRY)
    assert expected in message
    assert message.startswith("gpu-1: ") and "\n" not in message
    for paramiko_words in (
        "No existing session",
        "Bad authentication type",
        "protocol banner",
        "No authentication methods",
        "Errno",
        "allowed types: [",
    ):
        assert paramiko_words not in message
