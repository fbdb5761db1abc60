"""``deploy validate``, ``schedule``, ``schema`` and ``demo``: the commands around a run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from deploy.cli.common import (
    _FILE,
    CONTEXT,
    _fail,
    _find_playbook,
    _inventory_path,
    _playbooks_dir,
    end_process,
    inventory_option,
    limit_option,
    startup_done,
)
from deploy.errors import EXIT_INPUT, InputError


@click.command(context_settings=CONTEXT)
@inventory_option
@click.option(
    "--playbooks",
    "playbooks_dir",
    metavar="DIR",
    help="Directory of playbooks (default: ./playbooks).",
)
def validate(inventory: str | None, playbooks_dir: str | None) -> None:
    """Check the inventory and every playbook offline; contacts no host."""
    from deploy.config import load

    inventory_path = _inventory_path(inventory)
    directory = Path(playbooks_dir) if playbooks_dir else _playbooks_dir(inventory_path)
    try:
        problems = load.validate_all(inventory_path, directory)
    except InputError as exc:
        _fail(exc)
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        end_process(EXIT_INPUT)
    count = len(list(directory.glob("*.yaml")))
    click.echo(f"ok: {inventory_path} and {count} playbook(s) in {directory}")
    end_process(0)


@click.command(context_settings=CONTEXT)
@click.argument("playbook")
@click.option("--on-calendar", required=True, metavar="WHEN", help='e.g. "Mon *-*-* 03:00".')
@inventory_option
@limit_option
@click.option("-e", "--extra-vars", "extra", multiple=True, metavar="NAME=VALUE")
@click.option("--cron", is_flag=True, help="Print a crontab line instead of systemd units.")
@click.option("--install", is_flag=True, help="Write the units to ~/.config/systemd/user.")
@click.option("--name", metavar="UNIT", help="Unit name (default: deploy-PLAYBOOK).")
@click.option("--timeout", type=click.FloatRange(min=1), default=14400.0, show_default=True)
@click.option(
    "--report", "report_file", type=_FILE, help="Default: ~/.local/state/deploy/reports/UNIT.json"
)
@click.option("--log-file", type=_FILE, help="Default: ~/.local/state/deploy/logs/UNIT.log")
@click.option("--notify-url", metavar="URL", help="Webhook for runs that end with exit != 0.")
@click.option(
    "--check",
    is_flag=True,
    help="A drift check: apply --check --detailed-exitcode (changes nothing; exit 5 and the "
    "webhook when a host would change).",
)
@click.option(
    "--env-file",
    type=_FILE,
    help="Owner-only (0600) NAME='value' file setting the *_env secrets the hosts name "
    "(become_password_env, password_env). Default: ~/.config/deploy/env/UNIT.env.",
)
def schedule(
    playbook: str,
    on_calendar: str,
    inventory: str | None,
    limit: tuple[str, ...],
    extra: tuple[str, ...],
    cron: bool,
    install: bool,
    name: str | None,
    timeout: float,
    report_file: Path | None,
    log_file: Path | None,
    notify_url: str | None,
    check: bool,
    env_file: Path | None,
) -> None:
    """Run PLAYBOOK unattended on a calendar: systemd user timer (or cron), printed or installed."""
    from deploy import jobenv
    from deploy import schedule as plan
    from deploy.config import load
    from deploy.engine.history import state_home

    inventory_path = _inventory_path(inventory)
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    try:
        inv = load.load_inventory(inventory_path)
        pb = load.load_playbook(_find_playbook(playbook, inventory_path))
        hosts = load.resolve(
            inv, pb, extra_vars=load.parse_extra_vars(list(extra)), limit=list(limit) or None
        )
        plan.check_secrets(extra, [*pb.playbook.secret_vars, *inv.inventory.secret_vars])
        unit = name or plan.unit_name(pb.playbook.name, check=check)
        needed = jobenv.required_env((host.name, host.spec) for host in hosts)
        if needed or env_file is not None:
            given = env_file is not None
            env_file = (env_file or jobenv.default_env_file(config, unit)).absolute()
            jobenv.check_env_file(env_file, needed, given=given)
        job = plan.Job(
            name=unit,
            playbook=pb.path.resolve(),
            inventory=inventory_path.resolve(),
            on_calendar=on_calendar,
            workdir=Path.cwd(),
            report=(report_file or state_home() / "reports" / f"{unit}.json").absolute(),
            log_file=(log_file or state_home() / "logs" / f"{unit}.log").absolute(),
            timeout=timeout,
            limit=limit,
            extra_vars=extra,
            notify_url=notify_url,
            check=check,
            env_file=env_file,
            env_needs=tuple(need.describe() for need in needed),
        )
        if cron:
            if install:
                raise InputError(
                    "--install writes systemd units; for cron, pipe the line into `crontab -`"
                )
            click.echo(plan.cron_line(job), nl=False)
            return
        plan.check_calendar(on_calendar)
    except InputError as exc:
        _fail(exc)
    if install:
        for path in plan.install(job, plan.user_unit_dir(config)):
            click.echo(f"wrote {path}")
        click.echo(f"to start it: {plan.enable_hint(job)}")
    else:
        click.echo(
            f"# {job.service}\n{plan.render_service(job)}\n# {job.timer}\n{plan.render_timer(job)}",
            nl=False,
        )


@click.command("schema", context_settings=CONTEXT)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("schema"),
    show_default=True,
    help="Directory for hosts.schema.json and playbook.schema.json.",
)
def schema_command(out_dir: Path) -> None:
    """Write the JSON Schemas of hosts.yaml and playbooks, for editors to validate them."""
    from deploy.schema import write_schemas

    try:
        written = write_schemas(out_dir)
    except OSError as exc:
        _fail(InputError(f"cannot write the schemas to {out_dir}: {exc}"))
    for path in written:
        click.echo(f"wrote {path}")


@click.command(context_settings=CONTEXT)
@click.option(
    "--keep",
    is_flag=True,
    help="Leave the sandbox host running in the background, print how to use it, return.",
)
@click.option("--stop", is_flag=True, help="Stop a demo left running by --keep; clean up.")
def demo(keep: bool, stop: bool) -> None:
    """The whole story on this machine: a throwaway SSH host with SGLang's real model file.

    Starts sshd on a loopback port with the stand-in SGLang server, runs kimi-eagle3 (plan,
    restart, health, throughput gate), replays the `cat >>` mistake and its automatic
    rollback, shows history and rolls back. Needs openssh-server; touches nothing else.
    """
    from deploy.demo import run, run_kept, stop_kept

    startup_done()
    if stop:
        sys.exit(stop_kept())
    sys.exit(run_kept() if keep else run())
