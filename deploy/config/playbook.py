"""A playbook (`playbooks/NAME.yaml`): which hosts, which variables, which steps.

The steps a playbook may name are the registered step modules' (`deploy.steps`, imported here
for that catalogue; the step modules load nothing of the remote layer until a step runs).
When a step is registered later, `Playbook` is rebuilt with the new union.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

import deploy.steps  # noqa: F401  (the step catalogue: each step module declares its action)
from deploy.config import steps as catalogue
from deploy.config.inventory import empty_list
from deploy.config.services import ServiceSpec
from deploy.config.steps import StepCommon

if TYPE_CHECKING:  # to the type checker a step is its common part; to pydantic, the union
    StepEntry = StepCommon
else:  # validated by each step's own model (`catalogue.OwnModel`), described as the union
    StepEntry = Annotated[catalogue.step_entry(), catalogue.OWN_MODEL]

_SIZE = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


def _host_count(value: Any, minimum: int) -> Any:
    """A number of hosts (at least ``minimum``) or a percentage up to 100%, as written.

    `deploy.engine.batches` does the arithmetic; this only makes a typo an input error with
    the file and line, before anything runs.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value < minimum:
        raise ValueError(f"must be at least {minimum}, got {value!r}")
    match = _SIZE.match(value) if isinstance(value, str) else None
    if not (match or (isinstance(value, int) and not isinstance(value, bool))):
        raise ValueError(f"expected a number of hosts or a percentage like '25%', got {value!r}")
    if match:
        number, percent = int(match.group(1)), bool(match.group(2))
        if number < minimum:
            raise ValueError(f"must be at least {minimum}, got {value!r}")
        if percent and number > 100:
            raise ValueError(f"a percentage cannot exceed 100%, got {value!r}")
    return value


class Playbook(BaseModel):
    """The whole playbook file, as written (before templating)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(description="Short name, shown in reports and history.")
    description: str = Field(default="", description="What the playbook does and why.")
    hosts: str = Field(description="Host, group or pattern (globs, '!exclusions', ':'-separated).")
    vars: dict[str, Any] = Field(default_factory=dict, description="Defaults, lowest precedence.")
    secret_vars: list[str] = Field(
        default_factory=empty_list,
        description="Variables whose values are shown as *** in every output (names containing"
        " token, password, secret or key are secret without being listed).",
    )
    services: dict[str, ServiceSpec] = Field(
        default_factory=dict, description="Services the service steps act on, by name."
    )
    steps: list[StepEntry] = Field(min_length=1, description="What to do on each host, in order.")
    serial: int | str | list[int | str] | None = Field(
        default=None,
        description="Rolling batches: hosts per batch (2, '25%', or a ramp like [1, '50%']).",
    )
    max_fail: int | str | None = Field(
        default=None,
        description="Failed hosts a batch may have before the rest are called off (default 0).",
    )

    become: bool = Field(
        default=False,
        description="Run on every host as become_user through sudo (host and group settings win).",
    )

    @field_validator("serial", mode="before")
    @classmethod
    def _serial(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one batch size, e.g. [1, '50%']")
            return [_host_count(item, 1) for item in value]
        return None if value is None else _host_count(value, 1)

    @field_validator("max_fail", mode="before")
    @classmethod
    def _max_fail(cls, value: Any) -> Any:
        return None if value is None else _host_count(value, 0)


def _steps_changed() -> None:
    """Rebuild `Playbook` with the union of the actions registered now."""
    union: Any = Annotated[catalogue.step_entry(), catalogue.OWN_MODEL]
    Playbook.model_fields["steps"].annotation = list[union]
    Playbook.model_rebuild(force=True)


catalogue.on_change(_steps_changed)
