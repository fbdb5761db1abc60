"""Connection options, as Ansible spells them: ``-u``, ``--private-key``, ``--ask-pass``, ``-b``, ``-K``.

They override the inventory for every host of the command (as Ansible's do), and are applied
in one place, `_overrides`, by `with_connection` once the whole input is valid, before any
login. The options are not passed to the command functions (``expose_value=False``): each is kept in
the click context, so a command gains them with one decorator and one call.

Secrets asked for on the terminal (``--ask-pass``, ``-K``) are asked once per run, before any
login, and handed to `deploy.remote.sshauth.provide_secret`; a key passphrase is
asked only if a key turns out to be encrypted (`set_prompter`). Without a terminal, asking is
an input error (exit 2): a scheduled run uses ``password_env`` / ``become_password_env``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from deploy.errors import InputError

if TYPE_CHECKING:
    pass

_KEY = "deploy.connection"
T = TypeVar("T")


def _keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_KEY, {})[param.name or ""] = value
    return value


_OPTIONS = (
    click.option(
        "-u", "--user", "user", metavar="USER", help="Log in as USER on every host.",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "--private-key", "--key-file", "private_key", metavar="FILE",
        help="Private key to log in with (an encrypted one is asked for on a terminal).",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "--ssh-config", "ssh_config", metavar="FILE",
        help="Read only this ssh_config (as ssh -F), not ~/.ssh/config.",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "--ask-pass", "ask_pass", is_flag=True,
        help="Ask for the SSH password (or key passphrase) once, on the terminal.",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "-b", "--become", "become", is_flag=True,
        help="Run every host operation as --become-user (root) through sudo.",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "--become-user", "become_user", metavar="USER",
        help="The user sudo runs as (default: the inventory's, then root).",
        expose_value=False, callback=_keep,
    ),
    click.option(
        "-K", "--ask-become-pass", "ask_become_pass", is_flag=True,
        help="Ask for the sudo password once, on the terminal.",
        expose_value=False, callback=_keep,
    ),
)  # fmt: skip


def connection_options(command: Callable[..., T]) -> Callable[..., T]:
    """Add the connection options to a command (see `with_connection`)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def _ask(prompt: str) -> str:
    """Ask for a secret on the terminal, with echo turned off *before* the prompt shows.

    ``click.prompt(hide_input=True)`` before click 8.4 (``click>=8.1`` admits 8.1-8.3) writes
    the prompt and only then lets getpass turn echo off (with ``TCSAFLUSH``, which also
    discards input already typed). A password typed or pasted as soon as the prompt appeared
    (a password manager's auto-type, or a person while the machine was busy) could land in between: shown in clear on the screen, then thrown
    away, the command left waiting at a prompt that had already had its answer. getpass
    writes the prompt itself, once echo is off. An empty answer asks again, and Ctrl-C or
    Ctrl-D ends the command (a newline, then exit 1 with "Aborted!"), as click.prompt did.

    The answer is masked in everything deploy writes from then on, as a ``password_env``
    value is: a password typed here may also sit in a file whose diff is shown.
    """
    import getpass

    from deploy import masking

    while True:
        try:
            value = getpass.getpass(f"{prompt}: ")
        except (EOFError, KeyboardInterrupt):
            click.echo(err=True)  # getpass leaves the cursor after the prompt
            raise click.Abort() from None
        if value:
            masking.register(value)
            return value


def with_connection(items: list[T]) -> list[T]:
    """Apply the command's connection options to ``items`` (HostPlans or (name, spec) pairs).

    Raises:
        InputError: a secret must be asked for and there is no terminal to ask on.
    """
    given = click.get_current_context().meta.get(_KEY, {})
    update = _overrides(given)
    terminal = sys.stdin.isatty()
    for flag, kind, prompt in (
        ("ask_pass", "password", "SSH password"),
        ("ask_become_pass", "become", "BECOME (sudo) password"),
    ):
        if given.get(flag):
            if not terminal:
                raise InputError(
                    f"--{flag.replace('_', '-')} needs a terminal to ask on; "
                    f"use {'password_env' if kind == 'password' else 'become_password_env'}"
                )
            from deploy.remote.sshauth import provide_secret

            provide_secret(kind, _ask(prompt))
    # sshauth imports paramiko: a run without a terminal (cron, --yes in a script) leaves that
    # import for after its TCP connects have started (`dial_ahead`); it has no prompter to
    # clear unless sshauth was imported before (a second command in the same process).
    if terminal or "deploy.remote.sshauth" in sys.modules:
        from deploy.remote.sshauth import set_prompter

        set_prompter(_ask if terminal else None)
    return [_updated(item, update) for item in items] if update else items


def dial_ahead(plans: list[Any]) -> None:
    """Start the TCP connects of ``plans``' hosts (after `with_connection`: its overrides name
    the address, port and ssh_config); `deploy.remote.dial` says when it dials nothing.

    Left out: a host with ``connect_ahead: false``, and one whose login reads a secret from an
    unset variable (`ConnectSettings.secret_envs`) — its login stops before any connect and it
    is reported "not attempted" (`deploy.remote.sshauth.secret_of`), so nothing may reach it.
    """
    from deploy.engine.connect_settings import connect_settings
    from deploy.remote import dial

    hosts = [connect_settings(plan.name, plan.spec) for plan in plans if plan.spec.connect_ahead]
    # -K's or --ask-pass's answer aside (conservative): every variable the login reads is set.
    hosts = [h for h in hosts if all(env in os.environ for env in h.secret_envs().values())]
    dial.start(
        [(h.address, h.port or 22, h.connect_timeout) for h in hosts], [h.ssh_config for h in hosts]
    )


def _overrides(given: dict[str, Any]) -> dict[str, Any]:
    """The inventory fields the command's options override."""
    update: dict[str, Any] = {}
    if given.get("user"):
        update["user"] = given["user"]
    if given.get("private_key"):
        update["identity_file"] = given["private_key"]
    if given.get("ssh_config"):
        update["ssh_config"] = given["ssh_config"]
    if given.get("become"):
        update["become"] = True
    if given.get("become_user"):
        update["become_user"] = given["become_user"]
    return update


def _updated(item: T, update: dict[str, Any]) -> T:
    if isinstance(item, tuple):
        name, spec = item
        return (name, spec.model_copy(update=update))  # type: ignore[return-value]
    from dataclasses import replace

    return replace(item, spec=item.spec.model_copy(update=update))  # type: ignore[attr-defined, type-var]
