"""What runs for a service right now: the facts a restart derives from and an undo restores."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from deploy.edits.cmdline import masked_argv


@dataclass
class ServiceState:
    """What runs for a service right now, enough to start exactly that again later."""

    running: bool
    pid: int | None = None
    pgid: int | None = None
    sid: int | None = None
    argv: list[str] = field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: "deploy" (our pid file), "adopted" (a listener someone started by hand), "systemd".
    origin: str = "none"
    #: Process groups of orphans (``sglang::`` children of a dead server) still on the port.
    leftover_pgids: list[int] = field(default_factory=list)
    #: Every ``address:port`` the server listens on (``0.0.0.0:30000``, ``[::]:30000``).
    listen: list[str] = field(default_factory=list)
    #: /proc/PID/exe: the binary the server runs.
    exe: str | None = None

    def describe(self) -> str:
        if not self.running:
            return "not running" + (
                " (orphaned children hold the port)" if self.leftover_pgids else ""
            )
        command = " ".join(masked_argv(self.argv))[:160]
        return f"pid {self.pid} ({self.origin}): {command}"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> ServiceState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
