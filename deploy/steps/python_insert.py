"""``python_insert`` — insert statements into a class body, located with ``ast``.

A definition the class already has with the same AST is left alone, so a re-run is a no-op. One
with the same name and another definition is decided by ``if_exists``: ``fail`` (the default)
stops the run and names both ways out; ``keep`` leaves it, which is right for a backport, since
a later release that ships the method, with whatever body, decorators or ``async``, is already
in the desired state; ``replace`` overwrites it in place. Each name is decided on its own:
with ``keep``, the missing methods are still inserted beside the kept one. ``replace: true``,
the key's old spelling, still means ``if_exists: replace``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from deploy.config.inventory import StrictModel
from deploy.edits.pyinsert import insert_into_class
from deploy.steps import register
from deploy.steps.files import EditStep, FileWriteOptions


class InsertAnchor(StrictModel):
    """Insert right after, or right before, the named member of the class."""

    after: str | None = None
    before: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> InsertAnchor:
        if (self.after is None) == (self.before is None):
            raise ValueError("give exactly one of 'after' or 'before'")
        return self


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


@register
class PythonInsertStep(EditStep[PythonInsertArgs]):
    kind = "python_insert"
    example = """\
- name: Delegate get_embed_and_head to the wrapped model
  python_insert:
    path: "{{ model_file }}"
    class: KimiK25ForConditionalGeneration
    where: {after: forward}
    if_exists: keep   # a release that already has it, with any body, is done
    code: |
      def get_embed_and_head(self):
          return self.language_model.get_embed_and_head()
"""

    def describe(self) -> str:
        return f"python_insert into {self.args.class_} in {self.args.path}"

    def edit(self, content: bytes) -> tuple[bytes, str]:
        args = self.args
        where: str | tuple[str, str] = "end"
        if not isinstance(args.where, str):
            where = (
                ("after", args.where.after)
                if args.where.after
                else ("before", str(args.where.before))
            )
        result = insert_into_class(
            content, args.class_, args.code, where=where, if_exists=args.if_exists, path=args.path
        )
        return result.content, result.summary
