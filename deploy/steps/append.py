"""``append`` — append a block unless the file already holds it, like Ansible's ``lineinfile``.

A block present anywhere in the file (as whole lines) is no change, so a line someone appended
after it later does not make a re-run append a duplicate; ``at_end: true`` requires it to be
the file's last lines. It exists because people do ``cat >> file``; the kimi case shows why a verification step must follow it:
methods appended after ``EntryClass = [...]`` land at module level and the file still compiles.
"""

from __future__ import annotations

from pydantic import Field

from deploy.edits.text import append_text
from deploy.steps import register
from deploy.steps.files import EditStep, FileWriteOptions


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


@register
class AppendStep(EditStep[AppendArgs]):
    kind = "append"
    example = """\
- name: Turn on request logging
  append:
    path: /etc/sglang/server.env
    text: |
      SGLANG_LOG_REQUESTS=1
    # present anywhere in the file already: no change (like lineinfile);
    # at_end: true would require it to be the file's last lines
"""

    def edit(self, content: bytes) -> tuple[bytes, str]:
        result = append_text(content, self.args.text, at_end=self.args.at_end)
        return result.content, result.summary
