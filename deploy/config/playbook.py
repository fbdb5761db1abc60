"""A playbook (`playbooks/NAME.yaml`): which hosts, which variables, which steps."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deploy.config.services import ServiceSpec
from deploy.config.steps import StepEntry


class Playbook(BaseModel):
    """The whole playbook file, as written (before templating)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Short name, shown in reports and history.")
    description: str = Field(default="", description="What the playbook does and why.")
    hosts: str = Field(description="Host, group or pattern (globs, '!exclusions', ':'-separated).")
    vars: dict[str, Any] = Field(default_factory=dict, description="Defaults, lowest precedence.")
    services: dict[str, ServiceSpec] = Field(
        default_factory=dict, description="Services the service steps act on, by name."
    )
    steps: list[StepEntry] = Field(min_length=1, description="What to do on each host, in order.")
