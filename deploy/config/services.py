"""How a service runs on a host (`services:` in a playbook), for restart, health and undo.

A service is what the service steps (``restart``, ``wait_healthy``, ``smoke``,
``gate_throughput``) act on. Every field is templated per host, so an inventory overrides it
through variables (``sglang_port``, ``sglang_extra_args``...). Defaults fit SGLang.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from deploy.config.steps import _Strict

#: Seconds between readiness polls: a ready server is noticed within 0.6 s (plus one request),
#: and no 1-second window holds more than 2 requests (issue 6's bound for a loading server).
POLL_INTERVAL = 0.6


class ServiceSpec(_Strict):
    """One service: how to start it, find it, stop it and ask whether it is healthy."""

    manager: Literal["process", "systemd", "auto"] = Field(
        default="process",
        description="'process': deploy starts it (setsid, nohup, pid and log under state_dir); "
        "'systemd': systemctl on `unit`, the declared changes in deploy's drop-in; 'auto': "
        "systemd when the running server's /proc/PID/cgroup names a system unit, else process. "
        "A server that belongs to a unit is never signalled directly: 'process' refuses it.",
    )
    command: str | None = Field(
        default=None, description="Shell command line that starts the server (manager: process)."
    )
    unit: str | None = Field(
        default=None,
        description="systemd unit name (manager: systemd); empty: the unit the running "
        "server's cgroup names.",
    )
    unit_dir: str = Field(
        default="/etc/systemd/system",
        description="Where deploy's drop-in goes: `UNIT_DIR/UNIT.d/90-deploy.conf` (manager: "
        "systemd).",
    )
    cwd: str = Field(default="/", description="Working directory of the started process.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment added for a process started from `command`; an empty value "
        "leaves the inherited variable as it is.",
    )
    address: str = Field(
        default="127.0.0.1",
        description="Where to reach the server, as seen on the host itself, when neither its "
        "listening sockets nor its `--host` say (a wildcard address means loopback).",
    )
    port: int = Field(default=30000, ge=1, le=65535, description="The server's HTTP port.")
    api_key: str | None = Field(
        default=None,
        description="The server's API key when it does not say it itself (its `--api-key` "
        "or SGLANG_API_KEY environment come first): an inventory secret, e.g. "
        '"{{ sglang_api_key }}". Sent as `Authorization: Bearer`; masked everywhere.',
    )
    health_path: str = Field(
        default="/health_generate",
        description="200 here means ready (SGLang: a 1-token generation).",
    )
    match: str = Field(
        default="sglang.launch_server",
        description="Substring of the command line that identifies this service's server; a "
        "listener on the port without it is not stopped unless --force.",
    )
    user: str | None = Field(
        default=None,
        description="The user the server runs as when that is not the login/become user: only "
        "then is a listener run by another user adopted (as root, a less-privileged user's "
        "process never is unless named here).",
    )
    process_prefix: str = Field(
        default="sglang::",
        description="Title prefix of child processes the server may orphan (reaped after a stop).",
    )
    stop_timeout: float = Field(
        default=60.0, gt=0, description="Seconds between SIGTERM and SIGKILL of the process group."
    )
    drain_timeout: float = Field(
        default=300.0,
        gt=0,
        description="Seconds the main process gets, after SIGTERM to it alone, to finish "
        "in-flight requests before the group is stopped (default: 300 s, the budget of one "
        "generation in the smoke and gate steps). SGLang 0.5.9 keeps admitting requests while "
        "it drains and exits once none is in flight, so steady traffic is ended by this bound.",
    )
    python: str | None = Field(
        default=None,
        description="The server's interpreter, for a restart's `imports` check when no server "
        "runs (default: the first word of `command`).",
    )
    start_timeout: float = Field(
        default=2700.0,
        gt=0,
        description="Seconds a started server gets to be healthy: `wait_healthy`'s default, "
        "and the rollback's wait for the old server.",
    )
    gpus: Literal["all"] | list[int] | None = Field(
        default=None,
        description="GPUs the server uses where its own CUDA_VISIBLE_DEVICES does not say "
        "(which then decides): after a stop, wait until nvidia-smi shows them free.",
    )
    gpu_timeout: float = Field(default=120.0, gt=0, description="Seconds to wait for GPUs to free.")
    gpu_threshold_mib: int = Field(
        default=1024, ge=0, description="Memory used on a GPU below which it counts as released."
    )
    nvidia_smi: str = Field(default="nvidia-smi", description="nvidia-smi on the host.")
    agent_python: str = Field(
        default="python3", description="Interpreter on the host that runs deploy's process helper."
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_from_text(cls, value: Any) -> Any:
        """Templates render to text: accept "all", "none", "" and "0,1,2" / "[0, 1]" too."""
        if not isinstance(value, str) or "{{" in value:
            return value
        text = value.strip().strip("[]").strip()
        if text.lower() in ("", "none", "null"):
            return None
        if text.lower() == "all":
            return "all"
        try:
            return [int(part) for part in text.split(",")]
        except ValueError:
            return value

    @field_validator("unit", mode="before")
    @classmethod
    def _empty_unit(cls, value: Any) -> Any:
        """A template left at "" (kimi-eagle3's ``sglang_unit``) means: detect the unit."""
        return None if value == "" else value

    @field_validator("manager", mode="before")
    @classmethod
    def _empty_manager(cls, value: Any) -> Any:
        return "auto" if value == "" else value
