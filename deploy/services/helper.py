"""The host-side process helper (`deploy.hostpy.agent`), one exec per operation.

The process manager finds, stops and starts a server through it, and a restart's ``imports``
check asks it where the server's interpreter finds a module. Its program rides on argv (code,
not data: no secret, fixed size); the arguments travel on stdin, so an environment of any size
fits and none of it shows in /proc/PID/cmdline, which every local user can read.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.checks.interpreter import root_only_if_trusted
from deploy.errors import StepFailed
from deploy.hostpy import program
from deploy.remote.api import Host
from deploy.remote.host import quote

AGENT_SOURCE = program("agent")  # one program: agent.py with its parts inlined


def call_helper(
    remote: Host, python: str, operation: str, args: dict[str, Any], timeout: float = 60.0
) -> dict[str, Any]:
    """Run one helper ``operation`` with ``python`` on the host; its JSON answer.

    Raises:
        StepFailed: the helper failed, gave no JSON, or answered with an ``error``.
    """
    command = f"{quote(python)} -c {quote(AGENT_SOURCE)} {quote(operation)}"
    command = root_only_if_trusted(python, command)
    result = remote.run(command, stdin=json.dumps(args).encode(), timeout=timeout)
    if not result.ok:
        raise StepFailed(
            f"{remote.name}: process helper ({python}) failed "
            f"during {operation}: {result.tail(3) or f'exit {result.exit_status}'}"
        )
    try:
        value = json.loads(result.stdout)
    except ValueError as exc:
        raise StepFailed(f"{remote.name}: process helper gave no answer for {operation}") from exc
    if isinstance(value, dict) and value.get("error"):
        raise StepFailed(f"{remote.name}: {value['error']}")
    return dict(value)
