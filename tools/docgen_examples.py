"""The hand-written part of the generated docs: YAML examples for ``docs/playbooks.md`` and
``docs/inventory.md``. Everything else there is taken from the code (`tools.docgen`); every
example here is loaded by the real loader in ``tests/unit/test_docs.py``. The steps' examples
are declared by the step modules themselves (`deploy.steps.examples`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping

import yaml

from deploy.steps import examples

#: The playbook every step example below runs in: the examples are its ``steps:``.
EXAMPLE_FRAME = """\
# yaml-language-server: $schema=../schema/playbook.schema.json
name: example
description: Shows one step; every example on this page runs in this frame.
hosts: gpu
vars:
  model_file: /root/sglang/python/sglang/srt/models/kimi_k25.py
  sglang_port: 30000
  sglang_ready_timeout: 2700
services:
  sglang:
    command: >-
      python3 -m sglang.launch_server --model-path /models/kimi --port {{ sglang_port }}
    port: "{{ sglang_port }}"
"""


class _StepExamples(Mapping[str, str]):
    """Each step's example, read from its step class when asked (`deploy.steps.examples`), so
    that a step registered after this module was imported is documented too."""

    def __getitem__(self, kind: str) -> str:
        return examples()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(examples())

    def __len__(self) -> int:
        return len(examples())


#: Each step's example, declared by its step module (`deploy.steps.base.Step.example`).
STEP_EXAMPLES: Mapping[str, str] = _StepExamples()

SERVICES_EXAMPLE = """\
services:
  sglang:                       # started by deploy (setsid, pid and log under state_dir)
    manager: process
    command: >-
      {{ sglang_python | quote }} -m sglang.launch_server
      --model-path {{ model_path | quote }} --tp 8 --port {{ sglang_port }}
    cwd: /root
    env: {PYTHONPATH: /root/sglang/python}
    port: "{{ sglang_port }}"
    gpus: all                   # after a stop, wait until nvidia-smi shows them free
  router:                       # managed by systemd
    manager: systemd
    unit: sglang-router.service
    port: 8000
    health_path: /health
    match: sglang_router
"""

INVENTORY_EXAMPLE = """\
# yaml-language-server: $schema=./schema/hosts.schema.json
hosts:
  gpu-1:
    address: gpu-1.example.internal   # or an ~/.ssh/config alias; ProxyJump works
    user: root
    identity_file: ~/.ssh/id_ed25519
    vars: {sglang_python: /opt/sglang/.venv/bin/python}
  gpu-2:
    address: 10.0.0.12
    port: "{{ ssh_port }}"            # templated: checked as a port once rendered
  canary:                             # an empty value takes every default
groups:
  gpu: [gpu-1, gpu-2]                 # a list of hosts...
  eagle:                              # ...or hosts with shared variables
    hosts: [gpu-2, canary]
    vars: {draft_model_path: /models/kimi-eagle3-draft}
vars:
  ssh_port: 22
  sglang_port: 30000
"""


def example_playbook(block: str) -> str:
    """A complete playbook for one YAML example of ``docs/playbooks.md``.

    A list is a list of steps, run in `EXAMPLE_FRAME`; a mapping with ``name`` is a whole
    playbook already; a mapping with ``services`` only gets a name, hosts and a step that
    uses its first service. The tests load the result with `deploy.config.load.load_playbook`.
    """
    data = yaml.safe_load(block)
    if isinstance(data, list):
        return EXAMPLE_FRAME + "steps:\n" + textwrap.indent(block, "  ")
    if isinstance(data, dict) and "name" in data:
        return block
    if isinstance(data, dict) and set(data) == {"services"}:
        first = next(iter(data["services"]))
        head = "name: example\nhosts: all\n"
        return head + block + f"steps:\n  - start: {{service: {first}}}\n"
    raise ValueError(f"not a playbook, steps or services example:\n{block}")
