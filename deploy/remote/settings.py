"""`ConnectSettings`: everything needed to reach one host, in a module that imports no SSH.

Kept apart from `deploy.remote.connect` (which imports paramiko, ~0.1 s) so that a command
can describe the hosts it will contact before the SSH stack is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    #: Seconds the lock's exec may stay silent before the host counts as not answering.
    lock_timeout: float = 60.0
    #: The one ssh_config file to read (``ssh -F``); None: Fabric's defaults.
    ssh_config: str | None = None
    #: Run every host operation as ``become_user`` through sudo (`deploy.remote.become`).
    become: bool = False
    become_user: str = "root"
    become_password_env: str | None = None
    #: Offer delayed zlib compression (`deploy.remote.connect.Wire`).
    compression: bool = True

    def secret_envs(self) -> dict[str, str]:
        """The variables the login reads its secrets from, by kind: ``password`` (SSH's) and,
        under become only, ``become`` (sudo's). `deploy.remote.sshauth.secret_of` reads them;
        the CLI dials ahead no host with one unset (refused before any connect), SSH unimported."""
        envs = {"password": self.password_env, "become": self.become and self.become_password_env}
        return {kind: env for kind, env in envs.items() if env}
