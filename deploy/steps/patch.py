"""``patch`` — apply a unified diff with exact context; an applied diff is no change."""

from __future__ import annotations

from pydantic import Field, model_validator

from deploy.steps import register
from deploy.steps.files import EditStep, FileWriteOptions


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


@register
class PatchStep(EditStep[PatchArgs]):
    kind = "patch"
    example = """\
- name: Raise the request timeout
  patch:
    path: /etc/sglang/server.env
    diff: |
      --- a/server.env
      +++ b/server.env
      @@ -1,2 +1,2 @@
       SGLANG_HOST=127.0.0.1
      -SGLANG_TIMEOUT=30
      +SGLANG_TIMEOUT=60
    # or: diff_file: patches/timeout.diff  (relative to the playbook)
"""

    def edit(self, content: bytes) -> tuple[bytes, str]:
        from deploy.edits.patch import apply_patch  # loaded by a run that patches, only

        result = apply_patch(content, self.args.diff or "", path=self.args.path)
        return result.content, result.summary
