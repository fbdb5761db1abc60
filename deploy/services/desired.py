"""The server a restart wants, from the one that runs, and the checks around replacing it.

- `desired`: the running server's own argv, environment, cwd and user (uid, gid, groups) plus
  the restart's declared changes (`deploy.edits.cmdline`), else the service's ``command:``
  template (started as deploy's helper runs: a service names no user); whether the running
  server already is that server (then a restart is not needed for it).
- `reach_problem`: the new server must listen on every address:port the old one did (a server
  back on 127.0.0.1 where the old one listened on 0.0.0.0 passes every check made over SSH to
  the host's loopback, and refuses every remote client).
- `imports_problem`: the interpreter that will run the server must find the patched module in
  the patched file, else the restart would load another copy of it.

Pure functions over what the host-side helper reported; the steps do the I/O. The declared
changes arrive as `Changes` (the restart step converts its arguments), so this module knows
nothing of steps.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from deploy.config.services import ServiceSpec
from deploy.edits.cmdline import canonical, derive_argv, derive_env, describe_change, same_argv
from deploy.services.state import ServiceState


@dataclass
class Changes:
    """The declared changes to a server: flags set and removed, variables set and unset."""

    set: dict[str, Any] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: list[str] = field(default_factory=list)


@dataclass
class Desired:
    """How the server should run after the restart."""

    #: "running server" (derived from it) or "command template".
    source: str
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: For the template: the shell command line (kept as written when no change applies).
    command: str | None = None
    #: The running server already runs exactly this way (argv as SGLang reads it, and env).
    satisfied: bool = False
    #: Old -> new command line and environment, secret-looking values masked.
    diff: str = ""
    #: Whom it runs as (`ServiceState.run_as`: the running server's uid, gid and groups);
    #: None: as deploy's helper runs (the command template, or unknown).
    user: dict[str, Any] | None = None
    #: address:port the new server must listen on ([] = no requirement).
    reach: list[str] = field(default_factory=list)
    reach_note: str = ""


def desired(state: ServiceState, changes: Changes | None, spec: ServiceSpec) -> Desired:
    """The server to run: the running one plus the declared changes, else the template."""
    changes = changes or Changes()
    set_, remove = dict(changes.set), list(changes.remove)
    env_set, env_unset = dict(changes.env_set), list(changes.env_unset)
    if spec.manager == "systemd":  # the unit says how it runs: a restart is `systemctl restart`
        return Desired("systemd unit", satisfied=state.running)
    if state.running and state.argv:
        argv = derive_argv(state.argv, set_, remove, spec.match)
        env = derive_env(state.env, env_set, env_unset)
        same = same_argv(state.argv, argv, spec.match) and env == state.env
        result = Desired("running server", argv, env, state.cwd, satisfied=same)
        result.user = state.run_as()
        result.diff = describe_change(state.argv, argv, state.env, env, match=spec.match)
        touched = {canonical(name) for name in [*set_, *remove]}
        if touched & {"--host", "--port"}:
            result.reach_note = "--host/--port changed on purpose: reach not compared"
        else:
            result.reach = list(state.listen)
        return result
    command = spec.command
    if command and (set_ or remove):
        words = shlex.split(command)
        changed = derive_argv(words, set_, remove, spec.match)
        if not same_argv(words, changed, spec.match):
            command = shlex.join(changed)
    env = derive_env({k: v for k, v in spec.env.items() if v != ""}, env_set, env_unset)
    result = Desired("command template", env=env, cwd=spec.cwd, command=command)
    if command:
        result.diff = describe_change([], shlex.split(command), {}, env, match=spec.match)
    return result


def checked(state: ServiceState, changes: Changes | None, spec: ServiceSpec) -> Desired | None:
    """The new server as the checks before the stop see it, or None when no server runs.

    The running server's command line as the kernel shows it, with the declared changes, and
    its environment, cwd and user. For a systemd unit's server that is the unit's ExecStart
    with systemd's expansions done plus what deploy's drop-in changes: the server the restart
    will start, so its draft model, its argparse and its imports are checked before the unit
    is stopped, as for a process.
    """
    if spec.manager == "systemd":
        spec = spec.model_copy(update={"manager": "process"})
    want = desired(state, changes, spec)
    return want if want.source == "running server" else None


def reach_problem(name: str, before: list[str], now: list[str]) -> str | None:
    """Why the new server is not reachable where the old one was, or None."""
    missing = [address for address in before if address not in now]
    if not missing:
        return None
    listening = ", ".join(now) or "nothing"
    return (
        f"{name} now listens on {listening}, not on {', '.join(missing)} as the server it "
        "replaced did: clients that reached the old server would be refused"
    )


def imports_problem(answer: dict[str, Any]) -> str | None:
    """Why the server's interpreter would not load the patched file, or None (all resolve)."""
    if answer.get("error"):
        return str(answer["error"])
    problems = []
    for item in answer.get("results") or []:
        if item.get("ok"):
            continue
        where = (
            f"resolves to {item['origin_real']}"
            if item.get("origin_real")
            else f"is not found ({item.get('error')})"
        )
        ran = f", looked up {item['ran_as']}" if item.get("ran_as") else ""
        problems.append(
            f"{item['module']} {where} for {item['python']} ({answer.get('source')}, "
            f"cwd {item.get('cwd')}{ran}), not to {item['expected_real']}, the file this "
            "playbook changes: the restarted server would not load the change"
        )
    return "; ".join(problems) or None
