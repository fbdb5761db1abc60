"""The step vocabulary of playbooks: one model per action, its keys part of the public interface.

A step in YAML is a mapping with exactly one action key plus common keys::

    - name: Add the EAGLE-3 methods
      tags: [files]
      python_insert: {path: "{{ model_file }}", class: KimiK25ForConditionalGeneration, code: ...}

Each ``*Step`` model below is one such mapping; `StepEntry` is the union, discriminated by
which action key is present, so that pydantic reports errors under the right key and the JSON
Schema (``deploy schema``) offers completion per action.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from deploy.checks.throughput import DEFAULT_TOLERANCE, concurrency_levels
from deploy.config.inventory import StrictModel

_Strict = StrictModel


# --- action arguments -------------------------------------------------------------------------


#: Seconds between readiness polls: a ready server is noticed within 0.6 s (plus one request),
#: and no 1-second window holds more than 2 requests (issue 6's bound for a loading server).
POLL_INTERVAL = 0.6


class BackupArgs(_Strict):
    """Save a checksummed copy of ``path`` under ``state_dir`` (never beside the file)."""

    path: str = Field(description="Absolute path of the file on the host.")


class InsertAnchor(_Strict):
    """Insert right after, or right before, the named member of the class."""

    after: str | None = None
    before: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> InsertAnchor:
        if (self.after is None) == (self.before is None):
            raise ValueError("give exactly one of 'after' or 'before'")
        return self


class FileWriteOptions(_Strict):
    """How far a step that writes a file may go where the host is shared (issue 14)."""

    #: Listed after the step's own keys in "allowed:" messages (`deploy.config.errors`).
    KEYS_LAST: ClassVar[bool] = True

    unsafe_dir: bool = Field(
        default=False,
        description="Write even when the file's directory is writable by group or others, or "
        "owned by someone other than root or the login user (refused by default, as OpenSSH's "
        "StrictModes refuses: another user could swap names in it).",
    )
    hardlinks: Literal["refuse", "allow"] = Field(
        default="refuse",
        description="'allow': replace a file that has other hard links (its other names keep "
        "the old content); refused by default.",
    )


class PythonInsertArgs(FileWriteOptions):
    """Insert methods (or any statements) into a class body, found with the ``ast`` module."""

    path: str = Field(description="Absolute path of the Python file on the host.")
    class_: str = Field(alias="class", description="Class name; 'Outer.Inner' for a nested class.")
    code: str = Field(description="The statements to insert, written at any indentation.")
    where: Literal["end"] | InsertAnchor = Field(
        default="end", description="'end' of the class body, or {after: NAME} / {before: NAME}."
    )
    if_exists: Literal["keep", "replace", "fail"] = Field(
        default="fail",
        description=(
            "A class member of the same name with a different definition (another body, "
            "decorators, async, docstring): 'keep' leaves it and counts it as done (for "
            "backports: a later release already has it), 'replace' overwrites it, 'fail' stops. "
            "Decided per name: missing members are inserted either way."
        ),
    )
    replace: bool | None = Field(
        default=None,
        description=(
            "Deprecated spelling kept for old playbooks: true is if_exists: replace, false is "
            "if_exists: fail. Give one of the two keys, not both."
        ),
    )

    @model_validator(mode="after")
    def _replace_is_if_exists(self) -> PythonInsertArgs:
        if self.replace is None:
            return self
        if "if_exists" in self.model_fields_set:
            raise ValueError(
                "give if_exists only (replace is its old spelling: "
                "replace: true is if_exists: replace)"
            )
        self.if_exists = "replace" if self.replace else "fail"
        return self


class PatchArgs(FileWriteOptions):
    """Apply a unified diff with exact context; already applied means no change."""

    path: str = Field(description="Absolute path of the file on the host.")
    diff: str | None = Field(default=None, description="The unified diff text.")
    diff_file: str | None = Field(
        default=None, description="A file holding the diff, relative to the playbook."
    )

    @model_validator(mode="after")
    def _one_source(self) -> PatchArgs:
        if (self.diff is None) == (self.diff_file is None):
            raise ValueError("give exactly one of 'diff' or 'diff_file'")
        return self


class AppendArgs(FileWriteOptions):
    """Append text to the end of a file unless the file already holds it, like lineinfile."""

    path: str = Field(description="Absolute path of the file on the host.")
    text: str = Field(description="The text to append.")
    at_end: bool = Field(
        default=False,
        description=(
            "Require the text to be the file's last lines: present only earlier in the file "
            "counts as absent, and it is appended. Default: present anywhere (as whole "
            "consecutive lines) is no change."
        ),
    )


class VerifyPythonArgs(_Strict):
    """Check a Python file's structure, and that it compiles with the host's interpreter."""

    path: str = Field(description="Absolute path of the Python file on the host.")
    python: str = Field(
        default="python3", description="Interpreter on the host used for 'compiles'."
    )
    compiles: bool = Field(default=False, description="Compile the file with 'python' on the host.")
    compile_cache: bool = Field(
        default=True,
        description=(
            "Reuse a passed compile of the same file bytes by the same interpreter binary "
            "(recorded in state_dir/compiled); false compiles on every run."
        ),
    )
    class_has: dict[str, list[str]] = Field(
        default_factory=dict, description="Class -> names that must be defined in its body."
    )
    not_module_level: list[str] = Field(
        default_factory=list, description="Names that must not be defined at module level."
    )
    last_statement: str | None = Field(
        default=None, description="Source of the statement that must come last in the module."
    )


class VerifyTailArgs(_Strict):
    """Check that the file ends with the given lines."""

    path: str = Field(description="Absolute path of the file on the host.")
    lines: list[str] | None = Field(default=None, description="The last lines, in order.")
    last_line: str | None = Field(default=None, description="Shorthand for one last line.")
    ignore_blank: bool = Field(
        default=True, description="Ignore blank lines at the end of the file."
    )

    @model_validator(mode="after")
    def _one_expectation(self) -> VerifyTailArgs:
        if (self.lines is None) == (self.last_line is None):
            raise ValueError("give exactly one of 'lines' or 'last_line'")
        return self

    def expected(self) -> list[str]:
        return list(self.lines) if self.lines is not None else [str(self.last_line)]


class VerifyCommandArgs(_Strict):
    """Run a shell command on the host and check its exit status and output."""

    run: str = Field(description="Shell command, run as written (the one unquoted string).")
    expect_exit: int = Field(default=0, description="Required exit status.")
    expect_stdout: str | None = Field(
        default=None, description="Regular expression that must match somewhere in stdout."
    )
    timeout: float = Field(default=300.0, gt=0, description="Seconds before the command is killed.")


class ServiceArgs(_Strict):
    """Name of a service defined under the playbook's ``services:``."""

    service: str = Field(description="A key of the playbook's 'services'.")
    timeout: float | None = Field(
        default=None, gt=0, description="Seconds to wait for the stop (default: the service's)."
    )
    only_if_changed: bool = Field(
        default=True,
        description="Act only if an earlier step of this run changed something (like a handler).",
    )


class ArgChanges(_Strict):
    """Changes to the running server's command line, read as SGLang's argparse reads it."""

    set: dict[str, str | int | float | bool | list[str | int | float] | None] = Field(
        default_factory=dict,
        description="Flag -> value: replaces every occurrence (any spelling: `--tp` is "
        "`--tp-size`, `--x=y` is `--x y`) or is added at the end; true is a bare flag "
        "(store_true), false or null removes it, a list gives several values.",
    )
    remove: list[str] = Field(
        default_factory=list, description="Flags removed with their values, in any spelling."
    )


class EnvChanges(_Strict):
    """Changes to the running server's environment (the rest of it is kept as it is)."""

    set: dict[str, str] = Field(
        default_factory=dict,
        description='Variable -> value; an empty value (a template left at "") changes nothing.',
    )
    unset: list[str] = Field(default_factory=list, description="Variables removed.")


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
        "list gives several values) and `remove` (flags removed with their values).",
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


class WaitHealthyArgs(_Strict):
    """Wait until the service answers 200 on its health URL (refused and 503 mean: not yet)."""

    service: str = Field(description="A key of the playbook's 'services'.")
    url: str | None = Field(
        default=None,
        description="Path or http://127.0.0.1:PORT/path on the host (default: the service's).",
    )
    timeout: float = Field(
        default=2700.0, gt=0, description="Seconds (default 45 min: big models load slowly)."
    )
    interval: float = Field(
        default=POLL_INTERVAL,
        ge=0.5,
        description="Seconds between polls (at least 0.5: at most 2 requests a second).",
    )


class SmokeArgs(_Strict):
    """One POST /generate: non-empty text and completion_tokens > 0, optional regex."""

    service: str = Field(description="A key of the playbook's 'services'.")
    prompt: str = Field(default="The capital of France is", description="Prompt text.")
    expect: str | None = Field(default=None, description="Regular expression the text must match.")
    max_new_tokens: int = Field(default=16, ge=1)
    timeout: float = Field(default=300.0, gt=0)


class GateThroughputArgs(_Strict):
    """Output tokens per second at concurrency 1 and a higher level must reach a floor.

    Warm-up requests first (not counted), then ``samples`` waves of ``concurrency`` requests
    at once per level, each ``max_new_tokens`` long with ``ignore_eos`` (so every request
    generates the same length), counted by the server's ``meta_info.completion_tokens``; a
    level's figure is the median of its samples. ``min_ratio`` is judged with ``tolerance``:
    after / before must reach ``min_ratio * (1 - tolerance)`` at every level. With ``baseline:
    before`` and no server to measure before, the gate fails unless ``min_tokens_per_s`` is set.
    """

    service: str = Field(description="A key of the playbook's 'services'.")
    min_tokens_per_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Floor for the median at concurrency 1 (one request's decode speed); also what "
            "decides when there is no baseline."
        ),
    )
    baseline: Literal["before"] | None = Field(
        default=None, description="'before': measure the old server before the restart too."
    )
    min_ratio: float = Field(
        default=1.0, gt=0, description="New / before must reach this at every concurrency."
    )
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        ge=0,
        lt=1,
        description=(
            "Measurement noise allowed, as a fraction of min_ratio: the gate needs "
            "min_ratio * (1 - tolerance) (default 0.03: x0.97 for min_ratio 1.0)."
        ),
    )
    concurrency: int = Field(
        default=4, ge=1, description="The higher level; concurrency 1 is always measured too."
    )
    samples: int = Field(default=3, ge=3, description="Samples per level (the median counts).")
    warmup: int = Field(
        default=2, ge=1, description="Requests sent first and not counted (at the higher level)."
    )
    max_new_tokens: int = Field(
        default=64, ge=1, description="Tokens generated per request (ignore_eos: always all)."
    )
    prompt: str = Field(default="Write a short story about a lighthouse keeper.")
    timeout: float = Field(default=600.0, gt=0, description="Seconds per request.")

    @field_validator("min_tokens_per_s", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``"{{ sglang_min_tokens_per_s }}"`` with the variable's default ``""``: no floor."""
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "requests" in data:
            raise ValueError(
                "requests is gone: the gate now takes 'samples' waves of 'concurrency' requests "
                "at each level (concurrency 1 and the higher one); remove requests"
            )
        return data

    @model_validator(mode="after")
    def _some_floor(self) -> GateThroughputArgs:
        if self.min_tokens_per_s is None and self.baseline is None:
            raise ValueError("give min_tokens_per_s, baseline: before, or both")
        return self

    def levels(self) -> list[int]:
        """The concurrencies measured: 1 and ``concurrency``."""
        return concurrency_levels(self.concurrency)


# --- step entries -----------------------------------------------------------------------------


class StepCommon(_Strict):
    """Keys every step accepts besides its action."""

    name: str | None = Field(
        default=None, description="What the step is for, shown in plans and reports."
    )
    tags: list[str] = Field(default_factory=list, description="Select with --tags / --skip-tags.")


class BackupStep(StepCommon):
    backup: BackupArgs


class PythonInsertStep(StepCommon):
    python_insert: PythonInsertArgs


class PatchStep(StepCommon):
    patch: PatchArgs


class AppendStep(StepCommon):
    append: AppendArgs


class VerifyPythonStep(StepCommon):
    verify_python: VerifyPythonArgs


class VerifyTailStep(StepCommon):
    verify_tail: VerifyTailArgs


class VerifyCommandStep(StepCommon):
    verify_command: VerifyCommandArgs


class RestartStep(StepCommon):
    restart: RestartArgs


class StopStep(StepCommon):
    stop: ServiceArgs


class StartStep(StepCommon):
    start: ServiceArgs


class WaitHealthyStep(StepCommon):
    wait_healthy: WaitHealthyArgs


class SmokeStep(StepCommon):
    smoke: SmokeArgs


class GateThroughputStep(StepCommon):
    gate_throughput: GateThroughputArgs


#: action key -> step model. The order is the order shown in docs and error messages.
STEP_MODELS: dict[str, type[StepCommon]] = {
    "backup": BackupStep,
    "python_insert": PythonInsertStep,
    "patch": PatchStep,
    "append": AppendStep,
    "verify_python": VerifyPythonStep,
    "verify_tail": VerifyTailStep,
    "verify_command": VerifyCommandStep,
    "restart": RestartStep,
    "stop": StopStep,
    "start": StartStep,
    "wait_healthy": WaitHealthyStep,
    "smoke": SmokeStep,
    "gate_throughput": GateThroughputStep,
}

COMMON_KEYS = frozenset(StepCommon.model_fields)


def step_kind(raw: Any) -> str | None:
    """The action key of a raw step mapping (or model), or None when there is not exactly one."""
    if isinstance(raw, StepCommon):
        return action_of(raw)
    if not isinstance(raw, dict):
        return None
    actions = [key for key in raw if key in STEP_MODELS]
    return actions[0] if len(actions) == 1 else None


def action_of(step: StepCommon) -> str:
    """The action key of a validated step."""
    for kind, model in STEP_MODELS.items():
        if type(step) is model:
            return kind
    raise TypeError(f"not a step model: {type(step).__name__}")


def args_of(step: StepCommon) -> BaseModel:
    """The action's argument model of a validated step (e.g. its `PythonInsertArgs`)."""
    value = getattr(step, action_of(step))
    assert isinstance(value, BaseModel)
    return value


StepEntry = Annotated[
    Annotated[BackupStep, Tag("backup")]
    | Annotated[PythonInsertStep, Tag("python_insert")]
    | Annotated[PatchStep, Tag("patch")]
    | Annotated[AppendStep, Tag("append")]
    | Annotated[VerifyPythonStep, Tag("verify_python")]
    | Annotated[VerifyTailStep, Tag("verify_tail")]
    | Annotated[VerifyCommandStep, Tag("verify_command")]
    | Annotated[RestartStep, Tag("restart")]
    | Annotated[StopStep, Tag("stop")]
    | Annotated[StartStep, Tag("start")]
    | Annotated[WaitHealthyStep, Tag("wait_healthy")]
    | Annotated[SmokeStep, Tag("smoke")]
    | Annotated[GateThroughputStep, Tag("gate_throughput")],
    Discriminator(
        step_kind,
        custom_error_type="unknown_step",
        custom_error_message="a step needs exactly one action key: " + ", ".join(STEP_MODELS),
    ),
]
