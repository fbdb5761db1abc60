"""``copy`` — a file's whole content put in place, from ``content`` or ``src`` beside the playbook.

As Ansible's ``copy`` for one file: ``src`` relative to the playbook's directory, copied byte for
byte (read while the playbook is resolved: a missing one is bad input, exit 2, no host
touched), or ``content`` inline; ``dest``, ``mode``, ``owner``, ``group``, ``validate``. A file
already holding those bytes with that mode and owner is no change; a file that did not exist
is removed by undo, and an existing one restored byte for byte with its old mode and owner.

Where it differs from Ansible: ``validate`` runs on a private copy of the exact new bytes under
``state_dir`` (Ansible's runs on its temporary copy in its own remote tmp directory; either way
before the file is put in place, and a failure leaves it untouched); it is not run under
``--check``. A missing directory above ``dest`` is an error unless ``create_dirs: true`` (Ansible
creates none for ``copy`` of a file's content). ``diff: false`` hides the content everywhere
(plans, ``--json``, history, log file, webhook; a failed ``validate`` says its exit status, not
its output). A directory ``src``, ``remote_src`` and ``backup`` are not offered: undo keeps its
own checksummed copy, never a ``.bak`` beside the file. ``mode`` is a quoted octal string:
YAML reads ``644`` as a decimal number, the classic Ansible mistake, so a number is refused.
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
