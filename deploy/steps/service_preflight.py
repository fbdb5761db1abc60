"""What a service step (``restart``, ``stop``, ``start``) checks before the run touches anything.

The step's preflight (`deploy.engine.step_run`'s first phase): a server deploy will not serve —
in a container, on several nodes — is refused (exit 4), and so is a stranger on the port;
the server's own interpreter must find each ``imports`` module in the file named; a unit with
edits systemd has not loaded is refused (`deploy.steps.service_systemd`); and for a restart
that will replace the server, everything checkable without stopping it is checked now
(`deploy.services.prechecks`: the patched files' drift, the draft model, other users'
processes on the GPUs, the new command line against the server's own argument parser). The
step's plan and act (`deploy.steps.service`) start from what this leaves in the run's facts:
the server as the checks saw it, and whom the module lookup ran as.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from deploy.errors import NothingTouched, ServiceUnsupported, StepFailed
from deploy.steps.base import StepContext
from deploy.steps.service_args import RestartArgs, ServiceArgs
from deploy.steps.service_client import control, runtime

if TYPE_CHECKING:  # loaded when a service step runs (`deploy.steps.service_client`)
    from deploy.services.control import ServiceControl
    from deploy.services.state import ServiceState


def svc_spec_is_systemd(ctx: StepContext, name: str) -> bool:
    """Whether the playbook runs service ``name`` through systemd (its state has no argv)."""
    spec = ctx.services.get(name)
    return getattr(spec, "manager", "process") == "systemd" and bool(getattr(spec, "unit", None))


def preflight(ctx: StepContext, args: ServiceArgs, *, stops: bool) -> None:
    """Before the run changes anything: the interpreter that runs the server must find
    every ``imports`` module in the file named (a pip-installed sglang in site-packages
    beside an edited checkout would otherwise load the unpatched copy after the restart).
    ``stops``: the step stops the server (``restart``, ``stop``); a ``start`` checks nothing.

    A server deploy cannot restart as it runs — in a container, or one of several nodes
    — is refused here too, before anything is touched (`deploy.services.identity`).

    Raises:
        ServiceUnsupported: the server runs in a container or on several nodes (exit 4).
        StepFailed: a module resolves elsewhere, or not at all; both paths named.
        NothingTouched: a check of the new server refused it (`_before_stop`; exit 4).
    """
    name = args.service
    restart = args if isinstance(args, RestartArgs) else None
    systemd = svc_spec_is_systemd(ctx, name)
    if not stops or (systemd and restart is None):
        return
    svc = control(ctx, name)
    if restart is not None and restart.imports:
        python = svc.spec.python or (shlex.split(svc.spec.command or "") or ["python3"])[0]
        fallback = {"python": python, "env": svc.spec.env, "cwd": svc.spec.cwd}
        state, answer = svc.resolve_imports(dict(restart.imports), fallback)
        _refuse_unsupported(ctx, svc, state)
        # Who holds the port, judged before anything is touched (issue 32): a second
        # process tree or user on it, or another user's server, is not attempted.
        svc.refuse_stranger(restart=True)
        if state.running:  # a stranger on the port: refuse that first, and say so
            svc.check_ownership(state, force=ctx.force)
        from deploy.services.desired import imports_problem

        problem = imports_problem(answer)
        if problem:
            raise StepFailed(f"{ctx.host}: {problem}; nothing was stopped or changed")
        _systemd_preflight(ctx, svc, restart)
        versions: dict[str, str] = next(
            (r["versions"] for r in answer.get("results") or [] if r.get("versions")), {}
        )
        runtime(ctx, name)["interpreter_versions"] = versions
        ran = next((r["ran_as"] for r in answer.get("results") or [] if r.get("ran_as")), None)
        if ran:  # not root's to run (`deploy.hostpy.agent_trust`): say whom it ran as
            runtime(ctx, name)["imports_ran_as"] = ran
            ctx.note(f"{name}: the module lookup ran {ran}")
    else:
        state = svc.current()  # a unit's server: probed too (who holds the port)
        _refuse_unsupported(ctx, svc, state)
        svc.refuse_stranger(restart=restart is not None)
        _systemd_preflight(ctx, svc, restart)
        if restart is None:
            return
    if restart.imports and svc.spec.manager == "process":
        from deploy.services.prechecks import drift_problem

        drift = drift_problem(ctx.remote, ctx.state_dir, state, sorted(restart.imports.values()))
        if drift:
            raise NothingTouched(f"{ctx.host}: {name}: {drift}; nothing was stopped or changed")
    if state.origin == "systemd" and svc.process.last_probe is not None:
        # A unit's server (systemd's view has no command line): the process as the kernel
        # shows it, whose command line the checks before the stop start from.
        from deploy.services.identity import state_from_probe

        state = state_from_probe(svc.process.last_probe, svc.spec.process_prefix)
    runtime(ctx, name)["server"] = state
    _before_stop(ctx, svc, restart, state)


def _before_stop(
    ctx: StepContext, svc: ServiceControl, args: RestartArgs, state: ServiceState
) -> None:
    """Checks of the new server that need no stop (`deploy.services.prechecks`), made
    before anything is touched when the server will be replaced: its working directory
    still there, the draft model, and the new command line against the server's own
    argument parser.

    Raises:
        NothingTouched: a check refused; nothing was stopped or changed (exit 4).
    """
    from deploy.services import prechecks
    from deploy.services.desired import checked

    want = checked(state, args.changes(), svc.spec)
    if want is None or want.satisfied:
        return  # a template's server, or nothing to restart unless a file changes
    problem = prechecks.cwd_problem(want.cwd)
    if problem is None:
        problem = prechecks.draft_problem(ctx.remote, want.argv, want.cwd)
    if problem is None:
        problem = prechecks.foreign_gpu_problem(ctx.remote, svc.spec, state)
    if problem is None:
        problem = prechecks.argparse_problem(
            svc, want.argv, want.env, want.cwd, state.pid, note=ctx.note
        )
    if problem:
        raise NothingTouched(
            f"{ctx.host}: {args.service}: {problem}; nothing was stopped or changed"
        )


def _systemd_preflight(ctx: StepContext, svc: ServiceControl, args: RestartArgs | None) -> None:
    """A restart of a unit: its unloaded edits refused, a short stop timeout noted
    (`deploy.steps.service_systemd.preflight`)."""
    if args is not None and svc.spec.manager == "systemd":
        from deploy.steps import service_systemd

        service_systemd.preflight(ctx, svc, args.service)


def _refuse_unsupported(ctx: StepContext, svc: ServiceControl, state: ServiceState) -> None:
    from deploy.services.identity import unsupported

    problem = unsupported(state, svc.spec)
    if problem:
        raise ServiceUnsupported(f"{ctx.host}: {problem}; nothing was touched")
