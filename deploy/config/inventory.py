"""The inventory (`hosts.yaml`): hosts, groups and variables, as pydantic models.

These models describe the file as written; `deploy.config.load` turns them into resolved
per-host settings. Unknown keys are errors (a typo such as ``identity_fle`` must not be
silently ignored on a production inventory).
"""

from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

DEFAULT_STATE_DIR = "/var/lib/deploy"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_BECOME_USER = "root"


#: A host name, an IPv4 or IPv6 address (``[...]``, ``%zone``) or an ssh_config alias.
_ADDRESS = re.compile(r"[A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]*")


def valid_address(text: str) -> bool:
    """Whether ``text`` may be a host's address: nothing a shell or ssh reads specially (see
    `deploy.config.resolve`), no leading ``-``."""
    return _ADDRESS.fullmatch(text) is not None


#: Validation context key: keep templated strings as written (see `kept_as_written`).
AS_WRITTEN = "as_written"


def _admits_text(annotation: Any) -> bool:
    """Whether a rendered template (always a string) could validate as ``annotation``."""
    if annotation in (str, int, float, bool):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, UnionType):
        return any(_admits_text(arg) for arg in get_args(annotation))
    if origin is Annotated:
        return _admits_text(get_args(annotation)[0])
    return False


def kept_as_written(model: type[BaseModel], value: Any, info: ValidationInfo) -> bool:
    """Whether to keep ``value`` unvalidated: a template, in an as-written pass, in a scalar field.

    Files are validated twice: as written when loaded (typos are found before any variable is
    known) and per host after templating (`deploy.config.load`). ``port: "{{ p }}"`` is no int
    until then, so the first pass — the only one passing ``context={AS_WRITTEN: True}`` —
    keeps such strings. A template where a mapping or list belongs is still an error: it
    renders to a string, which never becomes one.
    """
    if not (isinstance(value, str) and ("{{" in value or "{%" in value)):
        return False
    if not (isinstance(info.context, dict) and info.context.get(AS_WRITTEN)):
        return False
    field = model.model_fields.get(info.field_name or "")
    return field is not None and _admits_text(field.annotation)


def empty_list() -> list[Any]:
    """``[]``, as the ``default_factory`` of a list field (``Field(default_factory=list)``
    means the same, at a cost).

    pydantic inspects a default factory's signature every time it builds a model with that
    field, to see whether it takes the validated data. For the builtin ``list``,
    ``inspect.signature`` finds no text signature and fails slowly: ~0.25 ms per field, 15
    fields in a ``deploy validate`` (~4 ms); for this function it takes ~15 us. (``dict``
    has a text signature and is cheap.)
    """
    return []


class StrictModel(BaseModel):
    """Base of every input model: unknown keys are errors; templates survive the as-written pass."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    @field_validator("*", mode="wrap")
    @classmethod
    def _keep_templates(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        return value if kept_as_written(cls, value, info) else handler(value)


class HostSpec(StrictModel):
    """One host as written in ``hosts:``. Every field may use ``{{ var }}`` templating."""

    address: str | None = Field(
        default=None,
        description="IP address, DNS name or ~/.ssh/config alias; defaults to the host's name.",
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="SSH port (default 22 or ssh_config's)."
    )
    user: str | None = Field(
        default=None, description="Login user (default: ssh_config's, then the local user)."
    )
    identity_file: str | None = Field(
        default=None, description="Private key file; the agent and ~/.ssh keys are tried too."
    )
    known_hosts: str | None = Field(
        default=None,
        description=(
            "known_hosts file whose keys are trusted; unknown, changed or @revoked keys are"
            " refused (default: ssh_config's UserKnownHostsFile, else ~/.ssh/known_hosts)."
        ),
    )
    ssh_config: str | None = Field(
        default=None,
        description=(
            "The one ssh_config file to read, as `ssh -F` (default: ~/.ssh/config and"
            " /etc/ssh/ssh_config). User, Port, HostName, IdentityFile, IdentitiesOnly,"
            " UserKnownHostsFile and ProxyJump are honoured."
        ),
    )
    accept_new_host_keys: bool = Field(
        default=False,
        description=(
            "Like OpenSSH's StrictHostKeyChecking=accept-new: trust and record a first-seen key."
        ),
    )
    password_env: str | None = Field(
        default=None,
        description=(
            "Name of an environment variable holding the password or key passphrase"
            " (never the secret itself)."
        ),
    )
    become: bool | None = Field(
        default=None,
        description=(
            "Run every host operation as become_user through sudo (default: the group's,"
            " then the playbook's, then false)."
        ),
    )
    become_user: str | None = Field(
        default=None, description="The user sudo runs as (default: the group's, then root)."
    )
    become_password_env: str | None = Field(
        default=None,
        description=(
            "Name of an environment variable holding the sudo password (never the secret"
            " itself); without it and without -K, sudo must not ask (NOPASSWD)."
        ),
    )
    connect_timeout: float = Field(
        default=10.0, gt=0, description="Seconds to wait for TCP + SSH handshake."
    )
    lock_timeout: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Seconds the lock's exec may stay silent (the login shell with its .bashrc, the"
            " state_dir checks, the lock) before the host counts as not answering (exit 4)."
            " Raise it for hosts whose login is slow under load."
        ),
    )
    compression: bool = Field(
        default=True,
        description=(
            "Compress the SSH traffic after login (zlib@openssh.com, used when sshd allows it,"
            " as its default does): a run's bursts fit TCP's first windows, fewer round trips."
        ),
    )
    connect_ahead: bool = Field(
        default=True,
        description=(
            "Let `deploy apply` make this host's TCP connect and send its SSH banner while it"
            " loads, once the input is valid (one to two round trips fewer). false: connect"
            " only when the login starts."
        ),
    )
    state_dir: str = Field(
        default=DEFAULT_STATE_DIR,
        description="Directory on the host for the lock, journals and saved copies.",
    )
    vars: dict[str, Any] = Field(default_factory=dict, description="Variables for this host.")


class GroupSpec(StrictModel):
    """A group written as a mapping: its hosts and the variables they share."""

    hosts: list[str] = Field(default_factory=empty_list)
    vars: dict[str, Any] = Field(default_factory=dict)
    become: bool | None = Field(
        default=None, description="become for the group's hosts (a host's own setting wins)."
    )
    become_user: str | None = Field(
        default=None, description="become_user for the group's hosts (a host's own wins)."
    )


class Inventory(StrictModel):
    """The whole ``hosts.yaml``."""

    hosts: dict[str, HostSpec | None] = Field(
        default_factory=dict,
        description="Host name -> settings (an empty value takes every default).",
    )
    groups: dict[str, list[str] | GroupSpec] = Field(
        default_factory=dict, description="Group name -> list of hosts, or {hosts, vars}."
    )
    vars: dict[str, Any] = Field(default_factory=dict, description="Variables for every host.")
    secret_vars: list[str] = Field(
        default_factory=empty_list,
        description="Variables whose values are shown as *** in every output (names containing"
        " token, password, secret or key are secret without being listed).",
    )

    @field_validator("hosts")
    @classmethod
    def _fill_empty_hosts(cls, hosts: dict[str, HostSpec | None]) -> dict[str, HostSpec | None]:
        return {name: spec if spec is not None else HostSpec() for name, spec in hosts.items()}

    def group(self, name: str) -> GroupSpec:
        """The group as a `GroupSpec`, whichever form it was written in."""
        raw = self.groups[name]
        return raw if isinstance(raw, GroupSpec) else GroupSpec(hosts=list(raw))

    def host(self, name: str) -> HostSpec:
        spec = self.hosts[name]
        assert spec is not None  # filled by _fill_empty_hosts
        return spec
