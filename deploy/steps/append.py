"""``append`` — append a block unless the file already holds it, like Ansible's ``lineinfile``.

A block present anywhere in the file (as whole lines) is no change, so a line someone appended
after it later does not make a re-run append a duplicate; ``at_end: true`` requires it to be
the file's last lines. It exists because people do ``cat >> file``; the kimi case shows why a verification step must follow it:
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
        result = append_text(content, args.text, at_end=args.at_end)
        return result.content, result.summary
