"""A command whose input is bad, or that contacts no host, asks for no secret.

``--ask-pass`` / ``-K`` ask on the terminal once the whole input is valid, right before the
run needs the secret; an option combination that is refused (exit 2) or a listing
(``--list-hosts``, which contacts no host) must not ask first. Run on a real pseudo-terminal
(`tests.integration.terminal`): a prompt nobody answers would hold the command until the
test's deadline.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.integration.conftest import Deploy, KimiHost
from tests.integration.terminal import on_terminal

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]


def _env(deploy: Deploy) -> dict[str, str]:
    return {**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory)}


def test_a_refused_option_combination_asks_for_no_password(make_kimi_hosts: MakeHosts) -> None:
    _, deploy = make_kimi_hosts(["0.5.9"])
    code, shown = on_terminal(
        ["apply", "kimi-eagle3", "--ask-pass", "-K", "--detailed-exitcode"],
        deploy.workdir,
        _env(deploy),
        answers=[],
        timeout=30,
    )
    assert "password" not in shown.lower(), shown
    assert code == 2, shown
    assert "--detailed-exitcode needs --check" in shown


def test_a_listing_asks_for_no_password(make_kimi_hosts: MakeHosts) -> None:
    _, deploy = make_kimi_hosts(["0.5.9"])
    code, shown = on_terminal(
        ["apply", "kimi-eagle3", "--ask-pass", "--list-hosts"],
        deploy.workdir,
        _env(deploy),
        answers=[],
        timeout=30,
    )
    assert "password" not in shown.lower(), shown
    assert code == 0 and "gpu-1" in shown, shown


def test_a_refused_rollback_asks_for_no_password(make_kimi_hosts: MakeHosts) -> None:
    """``--json`` without ``--yes``: there is no one to confirm to, so the rollback is
    refused (exit 2) — before asking for the password it would have logged in with."""
    _, deploy = make_kimi_hosts(["0.5.9"])
    code, shown = on_terminal(
        ["rollback", "--ask-pass", "--json"], deploy.workdir, _env(deploy), answers=[], timeout=30
    )
    assert "password" not in shown.lower(), shown
    assert code == 2 and "refusing to roll back without confirmation" in shown, shown
