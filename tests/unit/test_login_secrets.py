"""Which variables a host's login reads its secrets from: one rule (`ConnectSettings.secret_envs`)
for the login itself (`deploy.remote.sshauth.secret_of`) and for the CLI's dialing ahead."""

from __future__ import annotations

import pytest

from deploy.errors import InputError
from deploy.remote import sshauth
from deploy.remote.settings import ConnectSettings


def _settings(**fields: object) -> ConnectSettings:
    return ConnectSettings(name="gpu-1", address="127.0.0.1", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "envs"),
    [
        ({}, {}),
        ({"password_env": "SSH_PW"}, {"password": "SSH_PW"}),
        # Without become, sudo's variable is never read: an unset one refuses nothing.
        ({"become_password_env": "SUDO_PW"}, {}),
        ({"become": True, "become_password_env": "SUDO_PW"}, {"become": "SUDO_PW"}),
        (
            {"password_env": "SSH_PW", "become": True, "become_password_env": "SUDO_PW"},
            {"password": "SSH_PW", "become": "SUDO_PW"},
        ),
    ],
)
def test_the_login_reads_exactly_the_variables_secret_envs_names(
    fields: dict[str, object], envs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(**fields)
    assert settings.secret_envs() == envs
    for name in ("SSH_PW", "SUDO_PW"):
        monkeypatch.delenv(name, raising=False)
    for kind in ("password", "become"):
        if kind in envs:
            field = "become_password_env" if kind == "become" else "password_env"
            message = f"gpu-1: {field} names ${envs[kind]}, which is not set"
            with pytest.raises(InputError, match=message.replace("$", r"\$")):
                sshauth.secret_of(settings, kind)
            monkeypatch.setenv(envs[kind], f"{kind}-value")
            assert sshauth.secret_of(settings, kind) == f"{kind}-value"
        else:
            assert sshauth.secret_of(settings, kind) is None
