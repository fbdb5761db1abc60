"""``patch`` — apply a unified diff with exact context; an applied diff is no change."""

from __future__ import annotations

from deploy.config.steps import PatchArgs
from deploy.edits.patch import apply_patch
from deploy.steps.files import EditStep


class PatchStep(EditStep):
    kind = "patch"

    def edit(self, content: bytes) -> tuple[bytes, str]:
        args = self.args
        assert isinstance(args, PatchArgs)
        result = apply_patch(content, args.diff or "", path=args.path)
        return result.content, result.summary
