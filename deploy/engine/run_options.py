"""What a run is told (its options) and who listens to it (progress), shared by the engine.

`RunOptions` carries one run's settings to every host; `Progress` is the listener the terminal
display and the log file implement; `Cancel` is the one-way switch SIGINT, SIGTERM and
``--timeout`` flip. `holder_info` says who runs: it goes into the lock and the journal.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploy.config.inventory import HostSpec
from deploy.engine.connect_settings import connect_settings as connect_settings
from deploy.engine.holder import holder_info as holder_info
from deploy.engine.holder import run_by as run_by
from deploy.engine.results import StepResult
from deploy.remote.api import Host


class Progress(Protocol):
    """Who wants to know as a run goes (the terminal display, a log file)."""

    def host_event(self, host: str, message: str) -> None: ...

    def step_started(self, host: str, index: int, title: str) -> None: ...

    def step_finished(self, host: str, result: StepResult) -> None: ...


class NoProgress:
    def host_event(self, host: str, message: str) -> None:
        pass

    def step_started(self, host: str, index: int, title: str) -> None:
        pass

    def step_finished(self, host: str, result: StepResult) -> None:
        pass


class Cancel:
    """Set once (SIGINT, SIGTERM, ``--timeout``): hosts start no new step, and a host in the
    middle of its changes is rolled back as if its next step had failed."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        #: Hosts between their lock and their outcome: what an abandon leaves mid-run.
        self.busy: set[str] = set()

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; True at once when set (`deploy.interrupt.pause`)."""
        return self._event.wait(timeout)


#: Makes the (not yet opened) `Host` for an inventory host: (name, spec, accept new host keys).
HostOpener = Callable[[str, HostSpec, bool], Host]


def ssh_host(name: str, spec: HostSpec, accept_new: bool = False) -> Host:
    """The default `HostOpener`: a `RemoteHost` over SSH, with the inventory's settings."""
    from deploy.remote.host import RemoteHost

    return RemoteHost(connect_settings(name, spec, accept_new=accept_new))


@dataclass
class RunOptions:
    run_id: str
    playbook: str = ""
    check_mode: bool = False
    accept_new_host_keys: bool = False
    force: bool = False
    progress: Progress = field(default_factory=NoProgress)
    #: The inventory file, recorded so that ``deploy rollback`` finds this run.
    inventory: str | None = None
    #: Called with the run's record before any host is touched (the workstation's history:
    #: a run killed mid-way is still found by ``deploy rollback``).
    on_start: Callable[[Any], None] | None = None
    cancel: Cancel = field(default_factory=Cancel)
    #: How each host is opened: the one place the engine chooses a `Host` implementation
    #: (SSH by default; tests give `tests.unit.local_host.LocalHost`).
    open_host: HostOpener = ssh_host
