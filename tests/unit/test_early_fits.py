"""`deploy.remote.early.fits`: the handshake ahead only with a paramiko its adapters fit.

The adapters override private paramiko methods; a release that renamed or reshaped one must
make the shortcut decline (each host then connects at the login), not break the login.
"""

from __future__ import annotations

import threading

import paramiko
import pytest

from deploy.remote import early
from deploy.remote.settings import ConnectSettings


class _Auth:
    def _request_auth(self) -> None: ...

    def _parse_service_accept(self, m: object) -> None: ...

    @property
    def _client_handler_table(self) -> dict[int, object]:
        return {}


def test_the_installed_paramiko_fits() -> None:
    assert early.fits(paramiko.__version__)
    assert early.FITS


def test_an_untested_major_release_does_not() -> None:
    assert early.fits("5.1.0")
    assert not early.fits("6.0.0")
    assert not early.fits("2.12.0")
    assert not early.fits("")
    assert not early.fits("dev")


def test_a_renamed_or_reshaped_member_does_not() -> None:
    good = ((_Auth, "_request_auth", "method"), (_Auth, "_client_handler_table", "property"))
    assert early.fits("5.0.0", good)
    # gone (renamed upstream)
    assert not early.fits("5.0.0", ((_Auth, "_parse_auth_accept", "method"),))
    # a property turned into a method, a method into a property
    assert not early.fits("5.0.0", ((_Auth, "_request_auth", "property"),))
    assert not early.fits("5.0.0", ((_Auth, "_client_handler_table", "method"),))


def test_negotiate_declines_when_paramiko_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(early, "FITS", False)
    # A closed port: were it attempted, the connect would fail and be reported, not None.
    settings = ConnectSettings(name="h", address="127.0.0.1", port=1, known_hosts="/dev/null")
    assert early.negotiate(settings, threading.Event()) is None
