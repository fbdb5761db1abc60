"""`ConnectSettings`: everything needed to reach one host, in a module that imports no SSH.

Kept apart from `deploy.remote.connect` (which imports paramiko, ~0.1 s) so that a command
can describe the hosts it will contact, and start their handshakes in the background
(`deploy.remote.handshake`), before the SSH stack is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class ConnectSettings:
    """Everything needed to reach one host, already templated and validated."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    #: None: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts.
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    password_env: str | None = None
    connect_timeout: float = 10.0
    #: The one ssh_config file to read (``ssh -F``); None: Fabric's defaults.
    ssh_config: str | None = None
    #: Run every host operation as ``become_user`` through sudo (`deploy.remote.become`).
    become: bool = False
    become_user: str = "root"
    become_password_env: str | None = None
    #: Offer delayed zlib compression (`deploy.remote.compression`).
    compression: bool = True

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()

    def handshake_key(self) -> tuple[object, ...]:
        """What the connection's handshake (TCP, key exchange, host-key check) depends on.

        Two settings with the same key reach the same server over the same route and judge
        its key against the same files: a handshake made for one serves the other
        (`deploy.remote.handshake`). The user is part of it because ssh_config's ``Match
        user`` blocks may route by it; keys and secrets are not (they only log in).
        """
        return (
            self.name,
            self.address,
            self.port,
            self.user,
            self.known_hosts,
            self.connect_timeout,
            self.ssh_config,
            self.compression,  # negotiated in the key exchange
        )
