"""The arguments of the service steps (restart, stop, start): which service, and the changes
to the running server's command line and environment a restart declares.

Apart from `deploy.steps.service` so that the models — what `deploy validate`, the docs and
the JSON Schema read — stay a small module of their own; the step's probe, journal and act
live there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import (
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from deploy.config.inventory import AS_WRITTEN, StrictModel, empty_list
from deploy.config.template import is_template

if TYPE_CHECKING:
    from deploy.services.desired import Changes

__all__ = ["ArgChanges", "EnvChanges", "RestartArgs", "ServiceArgs", "or_text"]


class ServiceArgs(StrictModel):
    """Name of a service defined under the playbook's ``services:``."""

    service: str = Field(description="A key of the playbook's 'services'.")
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds to wait for the stop (default: the service's)."
    )
    only_if_changed: bool = Field(
        default=True,
        description="Act only if an earlier step of this run changed something (like a handler).",
    )


def or_text(what: str) -> Callable[[dict[str, Any]], None]:
    """A JSON Schema hook: the field's schema, or a string (``what``), e.g. a template."""

    def extend(schema: dict[str, Any]) -> None:
        branch = {k: v for k, v in schema.items() if k not in ("title", "description", "default")}
        for key in branch:
            del schema[key]
        schema["anyOf"] = [branch, {"type": "string", "description": what}]

    return extend


class ArgChanges(StrictModel):
    """Changes to the running server's command line, read as SGLang's argparse reads it.

    ``set`` and ``remove`` may also be written as one string (a template such as
    ``"{{ set_flags }}"`` fed by ``-e``, which renders to a string): ``set`` as a command line
    (``--mem-fraction-static 0.85 --enable-metrics``: a flag without a value is a bare flag),
    ``remove`` as flags separated by spaces or commas (`deploy.steps.flag_text`). Flags that
    move the server (``--host``, ``--port``, in any spelling) are refused unless
    ``allow_move: true``: clients would lose it, and the playbook should say it means that.
    """

    set: dict[str, str | int | float | bool | list[str | int | float] | None] = Field(
        default_factory=dict,
        description="Flag -> value: replaces every occurrence (any spelling: `--tp` is "
        "`--tp-size`, `--x=y` is `--x y`) or is added at the end; true is a bare flag "
        "(store_true), false or null removes it, a list gives several values. Or one string, "
        "a command line: '--mem-fraction-static 0.85 --enable-metrics'.",
        json_schema_extra=or_text("a command line, e.g. '--mem-fraction-static 0.85'"),
    )
    remove: list[str] = Field(
        default_factory=empty_list,
        description="Flags removed with their values, in any spelling. Or one string of flags "
        "separated by spaces or commas.",
        json_schema_extra=or_text("flags separated by spaces or commas"),
    )
    allow_move: bool = Field(
        default=False,
        description="Allow set/remove of --host or --port (flags that move the server: its "
        "clients lose it). Refused by default, when the playbook is loaded.",
    )

    @field_validator("set", "remove", mode="wrap")
    @classmethod
    def _from_text(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        if isinstance(value, str):
            as_written = isinstance(info.context, dict) and info.context.get(AS_WRITTEN)
            if as_written and is_template(value):
                return value  # the as-written pass: a template, parsed once rendered
            from deploy.edits.flagtext import parse_remove, parse_set  # only when written so

            value = parse_set(value) if info.field_name == "set" else parse_remove(value)
        return handler(value)

    @model_validator(mode="after")
    def _does_not_move(self) -> ArgChanges:
        if self.allow_move or isinstance(self.set, str) or isinstance(self.remove, str):
            return self  # allowed, or a template not rendered yet (the as-written pass)
        names = [*self.set, *self.remove]
        if not any(name.startswith(("--h", "--p")) for name in names):
            return self  # (a run that moves nothing does not load the flag tables)
        from deploy.edits.cmdline import canonical
        from deploy.edits.flagtext import MOVING_FLAGS

        moving = [name for name in names if canonical(name) in MOVING_FLAGS]
        if moving:
            raise ValueError(
                f"{moving[0]} moves the server (its clients would lose it): refused; set "
                "allow_move: true in the restart step's args to mean it"
            )
        return self


class EnvChanges(StrictModel):
    """Changes to the running server's environment (the rest of it is kept as it is)."""

    set: dict[str, str] = Field(
        default_factory=dict,
        description='Variable -> value; an empty value (a template left at "") changes nothing.',
    )
    unset: list[str] = Field(default_factory=empty_list, description="Variables removed.")


class RestartArgs(ServiceArgs):
    """Restart the server as it runs now, plus the declared changes (or from `command:`)."""

    only_if_changed: bool = Field(
        default=True,
        description="Restart only if an earlier step of this run changed something or the "
        "running server differs from the desired one (its argv/env plus `args`/`env`); false: "
        "always.",
    )
    args: ArgChanges | None = Field(
        default=None,
        description="Changes to the running server's command line: `set` (flag -> value; "
        "replaces every occurrence in any spelling, `--tp` being `--tp-size` and `--x=y` "
        "`--x y`, or is added at the end; true is a bare flag, false or null removes it, a "
        "list gives several values) and `remove` (flags removed with their values); each may "
        "be one string instead (a template fed by -e: set '--x 1 --y', remove '--a,--b'). "
        "--host and --port are refused unless `allow_move: true`.",
    )
    env: EnvChanges | None = Field(
        default=None,
        description="Changes to its environment: `set` (an empty value changes nothing: a "
        'template left at "" never wipes an inherited variable) and `unset`.',
    )
    imports: dict[str, str] = Field(
        default_factory=dict,
        description="Module -> file: before anything is stopped or changed, the server's own "
        "interpreter (with its environment and cwd) must resolve each module to that file.",
    )

    def changes(self) -> Changes:
        """The declared ``args`` and ``env`` changes, as `deploy.services.desired` takes them."""
        from deploy.services.desired import Changes

        return Changes(
            set=dict(self.args.set) if self.args else {},
            remove=list(self.args.remove) if self.args else [],
            env_set=dict(self.env.set) if self.env else {},
            env_unset=list(self.env.unset) if self.env else [],
        )
