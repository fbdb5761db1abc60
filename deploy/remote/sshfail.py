"""One line for every way a connection can fail: what happened, the likely cause, the fix.

paramiko and the socket layer speak in their own terms ("No existing session", "Bad
authentication type; allowed types: ['publickey']", "[Errno -2] Name or service not known").
An operator needs to know which of a handful of things went wrong and what to do about it, so
`describe` maps an exception to one sentence of ours and no paramiko wording reaches the user.

Pure: an exception and a little context in, a string out (unit-tested in
tests/unit/test_sshfail.py). `deploy.remote.connect` raises `HostUnreachable` with it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import paramiko


@dataclass(frozen=True)
class Attempt:
    """What we tried, for the message: ``name`` (inventory), ``target`` (``host:port``)."""

    name: str
    target: str
    user: str
    timeout: float
    keys: tuple[str, ...] = ()
    password: bool = False


def describe(exc: BaseException, attempt: Attempt) -> str:
    """The one-line message for ``exc`` raised while connecting (``name: cannot connect ...``)."""
    head = f"{attempt.name}: cannot connect to {attempt.target}"
    if isinstance(exc, socket.gaierror):
        return (
            f"{attempt.name}: cannot resolve {attempt.target.rsplit(':', 1)[0]} (DNS lookup "
            "failed); check the address in the inventory or ssh_config's HostName"
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return (
            f"{head}: connection refused (no SSH server listening on that port); check the "
            "address and port, and that sshd runs"
        )
    if isinstance(exc, socket.timeout | TimeoutError):
        return (
            f"{head}: no answer within {attempt.timeout:g} s (host down, or a firewall drops "
            "the packets); check the address, or raise connect_timeout"
        )
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{head}: {exc.strerror or 'network error'} (errno {exc.errno}); check the network"
    if isinstance(exc, paramiko.BadAuthenticationType):
        allowed = ", ".join(exc.allowed_types) or "none"
        return (
            f"{head}: the server does not accept "
            f"{'password' if attempt.password else 'this kind of'} authentication for "
            f"{attempt.user} (it allows: {allowed}); "
            + (
                "use a key (--private-key or identity_file)"
                if "publickey" in exc.allowed_types
                else "use --ask-pass or password_env"
            )
        )
    if isinstance(exc, paramiko.AuthenticationException):
        tried = ", ".join(attempt.keys) if attempt.keys else "the agent's and ~/.ssh's keys"
        if attempt.password:
            tried += " and a password"
        return (
            f"{attempt.name}: {attempt.target} refused login as {attempt.user} (tried {tried}); "
            "check the user (-u) and that the public key is in the user's authorized_keys"
        )
    text = str(exc)
    if "No authentication methods available" in text:
        return (
            f"{attempt.name}: no key or password to log in to {attempt.target} as "
            f"{attempt.user} (no identity_file, no ssh-agent key, no ~/.ssh key); pass "
            "--private-key, set identity_file, or use --ask-pass"
        )
    if "protocol banner" in text or "No existing session" in text:
        return (
            f"{head}: the port accepts connections but no SSH server answered within "
            f"{attempt.timeout:g} s (not sshd, or an overloaded one); check the port"
        )
    if "no acceptable" in text or "Incompatible" in text:
        return (
            f"{head}: no key-exchange or host-key algorithm in common with the server; "
            "check the server's sshd_config (HostKeyAlgorithms, KexAlgorithms)"
        )
    if isinstance(exc, EOFError | ConnectionResetError) or "closed" in text.lower():
        return (
            f"{head}: the server closed the connection during the handshake (sshd's "
            "MaxStartups, a firewall, or not an SSH server); retry, or check the server's log"
        )
    return f"{head}: SSH handshake failed ({type(exc).__name__}); retry with -vv for details"
