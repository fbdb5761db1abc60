"""Logging in: which keys and secrets a connection offers, and asking for what is missing.

Secrets: a password or key passphrase comes from ``password_env`` or from a prompt the CLI
made once (`provide_secret`: ``--ask-pass``, ``-K``); an encrypted key met without a
passphrase is asked for on the terminal when there is one (`set_prompter`), once per key file
per run. None is ever logged or put on a command line. Keys are loaded here rather than by
paramiko so that a wrong or missing passphrase is said as such (paramiko goes on to try a
password and reports the server's "Bad authentication type"), and so that an encrypted key's
bcrypt rounds are paid once per run, not once per host.

Failing: paramiko and the socket layer speak in their own terms ("No existing session", "Bad
authentication type; allowed types: ['publickey']", "[Errno -2] Name or service not known").
`describe` maps every way a connection can fail to one sentence of ours (what happened, the
likely cause, the fix), so that no paramiko wording reaches the user: pure, an exception and
the `Attempt` in, a string out; `deploy.remote.connect` raises `HostUnreachable` with it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from deploy.errors import HostUnreachable, InputError

if TYPE_CHECKING:
    from fabric import Connection

    from deploy.remote.settings import ConnectSettings

_PROVIDED: dict[str, str] = {}
_PROMPTER: list[Callable[[str], str]] = []
#: Key passphrases known this run (the workers' included), by the prompt that asks for one.
_PASSPHRASES: dict[str, str] = {}
_SECRETS_LOCK = threading.Lock()


def provide_secret(kind: str, value: str) -> None:
    """Keep a secret the CLI asked for (``password``: --ask-pass, ``become``: -K) for this run."""
    _PROVIDED[kind] = value


def set_prompter(prompt: Callable[[str], str] | None) -> None:
    """How to ask for a key's passphrase (a terminal prompt), or None where nobody can answer."""
    _PROMPTER[:] = [] if prompt is None else [prompt]


def secrets_for_worker() -> dict[str, Any]:
    """What a worker process needs of this run's secrets (sent over its pipe, never argv,
    environment or file): those asked for, the passphrases known, whether one may be asked."""
    with _SECRETS_LOCK:
        return {
            "provided": dict(_PROVIDED),
            "passphrases": dict(_PASSPHRASES),
            "can_ask": bool(_PROMPTER),
        }


def take_secrets(secrets: dict[str, Any], ask: Callable[[str], str] | None) -> None:
    """In a worker process: the run's secrets (`secrets_for_worker`), and how to ask the
    parent for a key's passphrase (None when the parent cannot ask either)."""
    _PROVIDED.update(secrets["provided"])
    _PASSPHRASES.update(secrets["passphrases"])
    set_prompter(ask if secrets["can_ask"] else None)


def ask_passphrase(prompt: str) -> str:
    """In the parent, for a worker: ask ``prompt`` on the terminal, once per key for the whole
    run — its own hosts (`_load_key`) and all the workers' share the answer (a wrong answer
    is the worker's to report, as when one process asks)."""
    with _SECRETS_LOCK:
        if prompt not in _PASSPHRASES:
            _PASSPHRASES[prompt] = _PROMPTER[0](prompt) if _PROMPTER else ""
        return _PASSPHRASES[prompt]


def secret_of(settings: ConnectSettings, kind: str) -> str | None:
    """The ``kind`` secret (``password``, ``become``) the CLI asked for, else the variable
    `ConnectSettings.secret_envs` names, else None; `InputError` when that is not set."""
    prompted, env = _PROVIDED.get(kind), settings.secret_envs().get(kind)
    if prompted is not None or not env:
        return prompted
    value = os.environ.get(env)
    if value is None:
        field = "become_password_env" if kind == "become" else "password_env"
        raise InputError(f"{settings.name}: {field} names ${env}, which is not set")
    return value


_KEYS: dict[tuple[str, int, int, str | None], paramiko.PKey] = {}


def _from_path(path: Path, passphrase: str | None) -> paramiko.PKey:
    """paramiko's key loader, once per key file version per run (callers hold the lock): an
    encrypted key's bcrypt rounds take ~0.1-1 s a load (module docstring)."""
    info = path.stat()
    cache = (str(path), info.st_ino, info.st_mtime_ns, passphrase)
    key = _KEYS.get(cache)
    if key is None:
        secret = passphrase.encode() if passphrase is not None else None
        key = _KEYS[cache] = paramiko.PKey.from_path(str(path), secret)
    return key


def _load_key(settings: ConnectSettings, path: Path, secret: str | None) -> paramiko.PKey | None:
    """The private key at ``path``, decrypted (a passphrase asked once per file per run, where
    someone can answer); None when the file does not exist (as ssh)."""
    if not path.exists():
        return None
    prompt = f"Passphrase for key {path}"
    with _SECRETS_LOCK:  # one prompt per key even when many hosts connect at once
        passphrase = secret if secret is not None else _PASSPHRASES.get(prompt)
        try:
            return _from_path(path, passphrase)
        except (paramiko.PasswordRequiredException, TypeError):
            # TypeError: cryptography's way of saying an OpenSSH-format key needs a password.
            if passphrase is not None or not _PROMPTER:
                raise HostUnreachable(
                    f"{settings.name}: the key {path} is encrypted and no passphrase was given; "
                    "run where deploy can prompt for it, set password_env, or load the key "
                    "into ssh-agent"
                ) from None
        except (paramiko.SSHException, ValueError) as exc:
            if passphrase is None:
                raise HostUnreachable(
                    f"{settings.name}: cannot read the private key {path}: not a key file "
                    "OpenSSH or paramiko can read"
                ) from exc
            raise HostUnreachable(
                f"{settings.name}: wrong passphrase for the key {path}; check password_env "
                "or the passphrase typed"
            ) from exc
        except OSError as exc:
            raise HostUnreachable(
                f"{settings.name}: cannot read the private key {path}: {exc.strerror}"
            ) from exc
        answer = _PROMPTER[0](prompt)
        try:
            key = _from_path(path, answer)
        except (paramiko.SSHException, ValueError) as exc:
            raise HostUnreachable(f"{settings.name}: wrong passphrase for the key {path}") from exc
        _PASSPHRASES[prompt] = answer  # the workers' hosts take it too (`ask_passphrase`)
        return key


def auth_kwargs(settings: ConnectSettings, conn: Connection) -> tuple[dict[str, Any], Attempt]:
    """paramiko's authentication arguments for ``conn``, and what they try (for messages)."""
    secret = secret_of(settings, "password")
    explicit = [settings.identity_file] if settings.identity_file else []
    listed = conn.ssh_config.get("identityfile", [])
    files = [Path(p).expanduser() for p in explicit + list(listed)]
    only = str(conn.ssh_config.get("identitiesonly", "no")).lower() == "yes"
    kwargs: dict[str, Any] = {}
    keys = [k for k in (_load_key(settings, p, secret) for p in files) if k is not None]
    # paramiko takes one key object; more files go by name, already proven readable.
    if keys:
        kwargs["pkey"] = keys[0]
    rest = [str(p) for p in files[1:] if p.exists()]
    conn.connect_kwargs.pop("key_filename", None)
    if rest:
        kwargs["key_filename"] = rest
    if secret is not None:
        kwargs.update(password=secret, passphrase=secret)
    if only:
        # IdentitiesOnly: offer only the named keys, as ssh does; the agent's and ~/.ssh's
        # keys could otherwise use up the server's MaxAuthTries first.
        kwargs.update(look_for_keys=False, allow_agent=False)
    attempt = Attempt(
        name=settings.name,
        target=f"{conn.host}:{conn.port or 22}",
        user=conn.user,
        timeout=settings.connect_timeout,
        keys=tuple(str(p) for p in files if p.exists()),
        password=secret is not None and not files,
    )
    return kwargs, attempt


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
