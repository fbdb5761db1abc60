"""The hand-written part of the generated docs: YAML examples for ``docs/playbooks.md`` and
``docs/inventory.md``. Everything else there is taken from the code (`tools.docgen`); every
example here is loaded by the real loader in ``tests/unit/test_docs.py``.
"""

from __future__ import annotations

import textwrap

import yaml

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

STEP_EXAMPLES: dict[str, str] = {
    "backup": """\
- name: Save the config a command below rewrites
  backup: {path: /etc/sglang/server.env}
""",
    "python_insert": """\
- name: Delegate get_embed_and_head to the wrapped model
  python_insert:
    path: "{{ model_file }}"
    class: KimiK25ForConditionalGeneration
    where: {after: forward}
    if_exists: keep   # a release that already has it, with any body, is done
    code: |
      def get_embed_and_head(self):
          return self.language_model.get_embed_and_head()
""",
    "patch": """\
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
""",
    "append": """\
- name: Turn on request logging
  append:
    path: /etc/sglang/server.env
    text: |
      SGLANG_LOG_REQUESTS=1
    # present anywhere in the file already: no change (like lineinfile);
    # at_end: true would require it to be the file's last lines
""",
    "verify_python": """\
- name: The methods are members of the class, not of the module
  verify_python:
    path: "{{ model_file }}"
    compiles: true
    python: /opt/sglang/.venv/bin/python
    class_has:
      KimiK25ForConditionalGeneration: [get_embed_and_head, set_embed_and_head]
    not_module_level: [get_embed_and_head, set_embed_and_head]
    last_statement: "EntryClass = [KimiK25ForConditionalGeneration]"
""",
    "verify_tail": """\
- name: The file still ends with the EntryClass SGLang loads
  verify_tail:
    path: "{{ model_file }}"
    last_line: "EntryClass = [KimiK25ForConditionalGeneration]"
""",
    "verify_command": """\
- name: The draft model is on the host
  verify_command:
    run: test -f /models/kimi-eagle3-draft/config.json && echo present
    expect_stdout: present
    timeout: 30
""",
    "restart": """\
- name: Restart SGLang with EAGLE-3 (if a file changed above or the server runs without it)
  tags: [service]
  restart:
    service: sglang
    args:
      set: {--speculative-algorithm: EAGLE3, --speculative-draft-model-path: /models/draft}
      remove: [--disable-cuda-graph]
    env: {set: {SGLANG_ENABLE_JIT_DEEPGEMM: "0"}, unset: [SGLANG_DEBUG]}
    imports: {sglang.srt.models.kimi_k25: "{{ model_file }}"}
""",
    "stop": """\
- name: Stop SGLang before the weights are replaced
  stop: {service: sglang, timeout: 120, only_if_changed: false}
""",
    "start": """\
- name: Start SGLang if it is not running
  start: {service: sglang, only_if_changed: false}
""",
    "wait_healthy": """\
- name: Wait until SGLang serves (refused while loading, 503 while warming up)
  wait_healthy: {service: sglang, timeout: "{{ sglang_ready_timeout }}"}
""",
    "smoke": """\
- name: One real generation
  smoke: {service: sglang, prompt: "The capital of France is", expect: "(?i)paris"}
""",
    "gate_throughput": """\
- name: At least 95% as fast as the server it replaced, and never under 50 tok/s
  gate_throughput:
    service: sglang
    baseline: before
    min_ratio: 0.95
    min_tokens_per_s: 50
""",
}

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
