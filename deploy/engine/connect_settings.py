"""The SSH settings of an inventory host: what `deploy.remote` needs to reach it."""

from __future__ import annotations

from deploy.config.inventory import HostSpec
from deploy.remote.settings import ConnectSettings


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
        lock_timeout=spec.lock_timeout,
        ssh_config=spec.ssh_config,
        become=bool(spec.become),
        become_user=spec.become_user or "root",
        become_password_env=spec.become_password_env,
        compression=spec.compression,
    )
