"""The process agent's wait for a stopped server's process groups to empty (`_wait_gone`).

After SIGTERM it gives up on stragglers 2 s after the main pids are gone (SGLang's orphans
ignore SIGTERM; they are SIGKILLed next). After SIGKILL it must wait its whole time: a server
that held GPUs and hundreds of GB of memory takes seconds to finish dying, and a wait cut at
2 s made `stop` report the dying server as a reaped orphan and give the port's wait 2 s less.
"""

from __future__ import annotations

import time

import pytest

from deploy.hostpy import agent

DYING_FOR = 2.6  # seconds the group stays non-empty: past the 2 s straggler cut


def _dying_group(monkeypatch: pytest.MonkeyPatch) -> float:
    began = time.monotonic()

    def members(pgids: object, sids: object = ()) -> list[int]:
        return [4242] if time.monotonic() - began < DYING_FOR else []

    monkeypatch.setattr(agent, "_members", members)
    monkeypatch.setattr(agent, "_alive", lambda pid: False)
    return began


def test_after_sigkill_the_whole_time_is_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    began = _dying_group(monkeypatch)
    assert agent._wait_gone({4242}, began + 10) is True  # type: ignore[no-untyped-call]
    assert time.monotonic() - began >= DYING_FOR


@pytest.mark.parametrize("main", [[4243], []], ids=["main pids gone", "none known"])
def test_after_sigterm_stragglers_are_given_2_s_once_the_main_pids_are_gone(
    monkeypatch: pytest.MonkeyPatch, main: list[int]
) -> None:
    """``[]``: the server's own pid was dead before the stop (an orphaned scheduler holding
    the port): its SIGTERM-ignoring stragglers are SIGKILLed after 2 s, not after the
    stop's whole timeout (a first version of the fix above waited 60 s there)."""
    began = _dying_group(monkeypatch)
    assert agent._wait_gone({4242}, began + 10, main) is False  # type: ignore[no-untyped-call]
    assert 2.0 <= time.monotonic() - began < DYING_FOR
