"""``append`` — plain append, like ``cat >> file``.

It exists because people do it; the kimi case shows why a verification step must follow it:
methods appended after ``EntryClass = [...]`` land at module level and the file still compiles.
"""

from __future__ import annotations

from deploy.config.steps import AppendArgs
from deploy.edits.text import append_text
from deploy.steps.files import EditStep


class AppendStep(EditStep):
    kind = "append"

    def edit(self, content: bytes) -> tuple[bytes, str]:
        args = self.args
        assert isinstance(args, AppendArgs)
        result = append_text(content, args.text)
        return result.content, result.summary
