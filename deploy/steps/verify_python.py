"""``verify_python`` — the file's structure is what the change promised, and it compiles.

The structural checks (class members, nothing at module level, the last statement) run locally
on the bytes already fetched. ``compiles`` runs the host's own interpreter — the one that will
import the file, e.g. SGLang's venv — since what parses depends on the Python version. Under
``--check`` the planned content is compiled from stdin, so nothing on the host is touched.
Otherwise a passed compile is recorded under ``state_dir/compiled`` and reused while the file's
bytes and the interpreter binary stay the same (`deploy.checks.compile`): a re-run that changes
nothing then costs the host no interpreter start, and the report says the result was reused.
The check is also sent with the lock (`speculative_command`), so a re-run waits for no round
trip of its own. A change run's check of the new bytes goes with the commit
(`StepContext.check_on_host`) when the structure passed: its verdict is the interpreter's exit
status alone — the message is read from stderr and the "reused" marker from stdout, but neither
decides — so the host can hold the commit record on it and the run waits once for both.
"""

from __future__ import annotations

from pydantic import Field

from deploy.checks.compile import (
    compile_command,
    compile_problem,
    compile_stdin_command,
    compiled_sha256,
    was_reused,
)
from deploy.checks.interpreter import ran_as
from deploy.checks.python_ast import check_python
from deploy.config.inventory import StrictModel, empty_list
from deploy.errors import CheckFailed
from deploy.statedir.layout import Layout
from deploy.statedir.records import sha256
from deploy.steps import register
from deploy.steps.base import Planned, Step, StepContext
from deploy.steps.files import read_file


class VerifyPythonArgs(StrictModel):
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
        default_factory=empty_list, description="Names that must not be defined at module level."
    )
    last_statement: str | None = Field(
        default=None, description="Source of the statement that must come last in the module."
    )


def speculative_command(args: VerifyPythonArgs, state_dir: str) -> str | None:
    """The cached compile check, which the lock's round trip may run ahead of time.

    A re-run that changes nothing then waits for nothing after the lock: the check ran with
    it, and its answer names the bytes it is about (`compiled_sha256`), which the step compares
    with what it checks. None when the step compiles nothing or keeps no cache (then nothing
    names the bytes).
    """
    if not args.compiles or not args.compile_cache:
        return None
    return compile_command(args.python, args.path, cache=Layout(state_dir).compiled)


@register
class VerifyPythonStep(Step[VerifyPythonArgs]):
    kind = "verify_python"
    example = """\
- name: The methods are members of the class, not of the module
  verify_python:
    path: "{{ model_file }}"
    compiles: true
    python: /opt/sglang/.venv/bin/python
    class_has:
      KimiK25ForConditionalGeneration: [get_embed_and_head, set_embed_and_head]
    not_module_level: [get_embed_and_head, set_embed_and_head]
    last_statement: "EntryClass = [KimiK25ForConditionalGeneration]"
"""
    runs_in_check_mode = True
    confined = True

    def reads(self) -> list[str]:
        return [self.args.path]

    def speculate(self, state_dir: str) -> list[str]:
        if not self.args.path.startswith("/"):
            return []
        command = speculative_command(self.args, state_dir)
        return [command] if command else []

    def answered_locally(self, ctx: StepContext) -> bool:
        # The structure is judged on the bytes held; the compile goes with the commit.
        return self.args.path in ctx.files

    def describe(self) -> str:
        return f"verify_python {self.args.path}"

    def plan(self, ctx: StepContext) -> Planned:
        args = self.args
        what = []
        if args.class_has:
            what.append("class members")
        if args.not_module_level:
            what.append("nothing at module level")
        if args.last_statement:
            what.append("last statement")
        if args.compiles:
            what.append(f"compiles with {args.python}")
        return Planned(summary="check " + (", ".join(what) or "that it parses"))

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        args = self.args
        content = read_file(ctx, args.path).content
        problems = check_python(
            content,
            class_has=args.class_has,
            not_module_level=args.not_module_level,
            last_statement=args.last_statement,
            path=args.path,
        )
        base = planned.summary
        if args.compiles:
            if ctx.check_mode:
                command = compile_stdin_command(args.python, args.path)
                result = ctx.remote.run(command, stdin=content, timeout=120)
                status, out, err = result.exit_status, result.stdout, result.stderr
            else:
                command = speculative_command(args, ctx.state_dir) or compile_command(
                    args.python, args.path
                )
                ahead = ctx.remote.ran_ahead(command)
                out = "" if ahead is None else ahead[1].decode("utf-8", "replace")
                # Run with the lock's round trip, before this run changed anything: a pass
                # counts only for the very bytes this step checks; a failure is checked again.
                if ahead is not None and ahead[0] == 0 and compiled_sha256(out) == sha256(content):
                    status, err = ahead[0], ahead[2]
                elif not problems and ctx.check_on_host(
                    command,
                    timeout=120,
                    explain=lambda code, stdout, stderr: self._verdict(
                        base, [], code, stdout, stderr
                    ),
                ):
                    planned.summary += ": compile check sent with the commit"
                    return
                else:
                    result = ctx.remote.run(command, timeout=120)
                    status, out, err = result.exit_status, result.stdout, result.stderr
            text = self._verdict(base, problems, status, out, err)
        else:
            text = self._verdict(base, problems, 0, "", "")
        if problems:
            raise CheckFailed(text)
        planned.summary = text

    def _verdict(self, base: str, problems: list[str], status: int, out: str, err: str) -> str:
        """The step's summary (from the plan's, ``base``), or — with ``problems``, or a failed
        compile, which it adds to them — why it failed; ``status``, ``out``, ``err``: the
        compile's answer (only its status decides: `compile_problem`)."""
        args = self.args
        problem = compile_problem(status, err, python=args.python) if args.compiles else None
        if problem:
            who = ran_as(out)
            problems.append(f"{problem} (compiled {who})" if who else problem)
        if problems:
            prefix = f"{args.path}: "
            return prefix + "; ".join(p.removeprefix(prefix) for p in problems)
        summary = base.replace("check ", "checked ", 1) + ": ok"
        if args.compiles and was_reused(out):
            summary += " (compile result reused: same bytes, same interpreter binary)"
        if args.compiles and (who := ran_as(out)):
            summary += f" (compiled {who})"
        return summary
