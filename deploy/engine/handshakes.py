"""Which hosts a command negotiates with ahead of the login, and with what settings.

`deploy.remote.handshake` makes each selected host's TCP connect, key exchange and host-key
check in the background while the command goes on validating its input. It may only reach
a host the command is going to contact, at the address it is going to contact, so a host
is negotiated ahead only when its connection settings as written in the inventory are
final: none of `HANDSHAKE_FIELDS` is a template (a playbook variable or ``-e`` could still
change it). Such a host simply connects when the engine opens it, as before.

Imports no SSH library (nor the engine's modules that do): a command calls this right after
its inventory is loaded, before the SSH stack is imported.
"""

from __future__ import annotations

from collections.abc import Iterable

from deploy.config.inventory import HostSpec, valid_address
from deploy.remote.handshake import Handshakes
from deploy.remote.settings import ConnectSettings

#: The host settings a handshake depends on (`ConnectSettings.handshake_key`).
HANDSHAKE_FIELDS = (
    "address",
    "port",
    "user",
    "known_hosts",
    "connect_timeout",
    "ssh_config",
    "compression",
)


def connect_settings(name: str, spec: HostSpec, *, accept_new: bool = False) -> ConnectSettings:
    """The SSH settings of an inventory host (``accept_new``: the run's --accept-new-host-keys)."""
    return ConnectSettings(
        name=name,
        address=spec.address or name,
        port=spec.port,
        user=spec.user,
        identity_file=spec.identity_file,
        known_hosts=spec.known_hosts,
        accept_new_host_keys=spec.accept_new_host_keys or accept_new,
        password_env=spec.password_env,
        connect_timeout=spec.connect_timeout,
        ssh_config=spec.ssh_config,
        become=bool(spec.become),
        become_user=spec.become_user or "root",
        become_password_env=spec.become_password_env,
        compression=spec.compression,
    )


def settled(name: str, spec: HostSpec) -> bool:
    """Whether ``spec`` (as written) already has the connection settings the run will use."""
    if not valid_address(spec.address if spec.address is not None else name):
        return False  # refused as input (exit 2) before any host is contacted
    for name in HANDSHAKE_FIELDS:
        value = getattr(spec, name)
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            return False
    return True


def start_handshakes(
    handshakes: Handshakes, hosts: Iterable[tuple[str, HostSpec]], *, accept_new: bool = False
) -> None:
    """Begin the handshakes of the ``hosts`` (as written) whose connection settings are final."""
    handshakes.start(
        connect_settings(name, spec, accept_new=accept_new)
        for name, spec in hosts
        if settled(name, spec)
    )
