"""``template`` — a Jinja file beside the playbook, rendered for each host, put in place.

Rendered while the playbook is resolved, with the host's variables, in the same sandboxed Jinja
environment as every playbook string (`deploy.config.template`: undefined variables are errors,
comments are ``{## ##}``, output bounded): a template that does not render is bad input at the
step's ``src``, before any host is touched. Then it is ``copy``'s ``content``: the same
diff, ``--check``, no change when the file already holds it, undo, ``validate``,
``mode``/``owner``/``group``, ``create_dirs`` and ``diff: false`` (see ``copy``). Unlike Ansible, Jinja's output uses ``\\n`` line endings whatever the template
file's (Jinja's default ``newline_sequence``), and the Ansible-only variables
(``ansible_managed``, facts) do not exist: ``inventory_hostname`` and ``playbook_dir`` do.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from deploy.steps import register
from deploy.steps.put import PutStep, SourcedArgs


class TemplateArgs(SourcedArgs):
    """Render a Jinja template beside the playbook for the host and put it in place."""

    RENDER: ClassVar[bool] = True

    src: str | None = Field(
        default=None,
        description="A Jinja template on the workstation, relative to the playbook's "
        "directory, rendered with the host's variables.",
    )
    content: str | None = Field(
        default=None,
        description="An inline template instead of src (rendered like every playbook string).",
    )


@register
class TemplateStep(PutStep[TemplateArgs]):
    kind = "template"
    example = """\
- name: Render the server's settings for this host
  template:
    src: templates/sglang.conf.j2   # e.g. port={{ sglang_port }}
    dest: /etc/sglang/sglang.conf
    mode: "0644"
    create_dirs: true               # /etc/sglang may not exist yet
"""
