"""``copy`` — a file's whole content put in place, from ``content`` or ``src`` beside the playbook.

As Ansible's ``copy`` for one file: ``src`` relative to the playbook's directory (read while the
playbook is resolved: a missing one is bad input, exit 2), or ``content`` inline; ``dest``,
``mode``, ``owner``, ``group``, ``validate``. A file already holding those bytes with that mode
and owner is no change. What differs from Ansible and why: `deploy.steps.put` (validate runs on
a private copy under ``state_dir``; ``diff: false`` for secrets; a missing directory is an
error unless ``create_dirs``). Directories (``src: dir/``), ``remote_src`` and ``backup`` are
not offered: undo keeps its own checksummed copy, never a ``.bak`` beside the file.
"""

from __future__ import annotations

from pydantic import Field

from deploy.steps import register
from deploy.steps.put import PutStep, SourcedArgs


class CopyArgs(SourcedArgs):
    """Put a file in place from inline content or a file beside the playbook."""

    src: str | None = Field(
        default=None,
        description="A file on the workstation, relative to the playbook's directory; copied "
        "byte for byte (not rendered).",
    )
    content: str | None = Field(
        default=None, description="The file's content, inline (rendered like every string)."
    )


@register
class CopyStep(PutStep[CopyArgs]):
    kind = "copy"
    example = """\
- name: Install the server's environment file
  copy:
    src: files/server.env          # beside the playbook; or content: "..."
    dest: /etc/sglang/server.env
    mode: "0640"
    owner: root
    group: root
    validate: grep -q '^SGLANG_' %s   # must exit 0 before the file is put in place
- name: The API key, never shown in plans or reports
  copy:
    content: "{{ api_key }}"
    dest: /etc/sglang/api-key
    mode: "0600"
    diff: false
"""
