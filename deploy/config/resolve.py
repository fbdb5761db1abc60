"""Resolving: validated files and command-line input in, one fully rendered plan per host out.

The second of the config layer's two validations (`deploy.config.load` is the first, the
files as written). Each host gets its variables merged in a fixed precedence (`merge_vars`),
every string of its steps, services and settings rendered with them, and the result validated
again by the same models, so that ``port: "{{ ssh_port }}"`` is checked as the port it
becomes. Only the steps that will run are rendered: an undefined variable in a step skipped
by ``--tags`` is not an error. Nothing here touches the network or any host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from deploy import masking, trace
from deploy.config.errors import Problems, validation_error
from deploy.config.inventory import DEFAULT_BECOME_USER, HostSpec, valid_address
from deploy.config.local_files import LocalFiles
from deploy.config.playbook import Playbook
from deploy.config.select import check_tags, filter_steps, select_hosts
from deploy.config.services import ServiceSpec
from deploy.config.steps import STEP_MODELS, StepCommon, args_of, step_entry, validate_step
from deploy.config.template import BUILTIN_VARS, Origin, Variables
from deploy.config.yamlpos import KeyPath, Positions, format_path
from deploy.errors import InputError, SourcePosition

if TYPE_CHECKING:
    from deploy.config.inventory_file import LoadedInventory
    from deploy.config.load import LoadedPlaybook

T = TypeVar("T")


@dataclass(frozen=True)
class HostPlan:
    """Everything the engine needs to run one playbook on one host, fully templated.

    ``steps`` pairs each selected step with its index in the playbook (``steps[i]`` in error
    messages and reports). A patch step's ``diff_file`` has been read: it carries ``diff``.
    ``vars`` are the merged variables, rendered (one that nothing uses and that cannot be
    rendered is kept as written).
    """

    name: str
    spec: HostSpec
    vars: dict[str, Any]
    steps: list[tuple[int, StepCommon]]
    playbook: Playbook
    playbook_path: Path
    services: dict[str, ServiceSpec] = field(default_factory=dict)


def merge_vars(
    inv: LoadedInventory,
    pb: LoadedPlaybook | None,
    host: str,
    extra_vars: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Origin]]:
    """The variables of ``host`` for this run, as written, and where each value came from.

    Precedence, lowest first; a higher source replaces a variable outright (mappings and lists
    are not merged, as in Ansible's default):

    1. playbook ``vars`` (the playbook's defaults);
    2. inventory ``vars`` (every host);
    3. ``vars`` of each group that lists the host, groups in alphabetical order of their names,
       a later group winning (as in Ansible);
    4. the host's own ``vars``;
    5. extra vars, ``-e NAME=VALUE`` / ``-e @FILE.yaml`` (a later ``-e`` winning).

    On top of all, built-ins no source may set: ``inventory_hostname`` (the host's name in the
    inventory) and ``playbook_dir`` (the playbook's directory, absolute; absent when no
    playbook is involved, as for ``rollback``).
    """
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}

    def layer(source: Mapping[str, Any], origin_of: Any) -> None:
        for name, value in source.items():
            values[name] = value
            origins[name] = origin_of(name)

    if pb is not None:
        layer(pb.playbook.vars, lambda n: Origin(pb.positions, ("vars", n)))
    inventory = inv.inventory
    layer(inventory.vars, lambda n: Origin(inv.positions, ("vars", n)))
    for group in sorted(inventory.groups):
        spec = inventory.group(group)
        if host in spec.hosts:
            layer(spec.vars, lambda n, g=group: Origin(inv.positions, ("groups", g, "vars", n)))
    layer(inventory.host(host).vars, lambda n: Origin(inv.positions, ("hosts", host, "vars", n)))
    extra_origins = getattr(extra_vars, "origins", {})
    layer(extra_vars, lambda n: extra_origins.get(n) or Origin(None, (n,), label="-e"))
    builtins = {"inventory_hostname": host}
    if pb is not None:
        builtins["playbook_dir"] = str(pb.path.parent.resolve())
    layer(builtins, lambda n: Origin(None, (n,), label="built-in"))
    return values, origins


def _read_diff(
    pb: LoadedPlaybook, index: int, args: dict[str, Any], cache: dict[Path, str]
) -> None:
    """Replace a patch step's ``diff_file`` by the text it names (relative to the playbook)."""
    name = args.get("diff_file")
    if not isinstance(name, str) or "diff" in args:
        return  # nothing to read, or both given: validation says so
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = pb.path.parent / path
    if path not in cache:
        position = pb.positions.locate(("steps", index, "patch", "diff_file"))
        try:
            cache[path] = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"diff file not found: {path}", position) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read diff file {path}: {exc}", position) from None
    del args["diff_file"]
    args["diff"] = cache[path]


def _local_reader(action: str) -> Callable[[dict[str, Any], LocalFiles], dict[str, Any]] | None:
    """The ``read_local_files`` hook of an action's arguments model (`deploy.config.local_files`)."""
    entry = STEP_MODELS.get(action)
    if entry is None or action not in entry.model_fields:
        return None
    model = entry.model_fields[action].annotation
    reader = getattr(model, "read_local_files", None)
    return reader if callable(reader) else None


def _validated(
    validate: Callable[[Any], T], root: Any, data: Any, positions: Positions, base: KeyPath
) -> T:
    """Validate rendered ``data``; a failure becomes an InputError at the YAML position."""
    try:
        return validate(data)
    except ValidationError as exc:
        raise validation_error(exc, root=root, data=data, positions=positions, base=base) from None


def _host_spec(
    inv: LoadedInventory, host: str, variables: Variables, playbook_become: bool = False
) -> HostSpec:
    raw = inv.data["hosts"][host] or {}
    written = {key: value for key, value in raw.items() if key != "vars"}
    rendered = variables.render(written, Origin(inv.positions, ("hosts", host)))
    rendered["vars"] = raw.get("vars", {})
    spec = _validated(HostSpec.model_validate, HostSpec, rendered, inv.positions, ("hosts", host))
    _check_address(inv, host, spec)
    return _with_become(inv, host, spec, playbook_become)


def _check_address(inv: LoadedInventory, host: str, spec: HostSpec) -> None:
    """The address the host is reached at (its name by default), once rendered.

    ssh_config's ProxyCommand gets it as ``%h``, in a command line a shell may read: ``a;b``
    there would run ``b`` on the workstation, and a leading ``-`` is an option. No real host
    name, address or alias has such characters, so they are refused before any host is
    contacted (exit 2), whatever ssh_config says.

    Raises:
        InputError: the address holds a character no host name has.
    """
    address = spec.address if spec.address is not None else host
    if valid_address(address):
        return
    path: tuple[str, ...] = (
        ("hosts", host, "address") if spec.address is not None else ("hosts", host)
    )
    raise InputError(
        f"{address!r} is not a host name, IP address or ssh_config alias "
        "(letters, digits, '.', '-', '_', ':', '%', '[ ]')",
        inv.positions.locate(path, prefer_key=spec.address is None),
    )


def _with_become(inv: LoadedInventory, host: str, spec: HostSpec, playbook: bool) -> HostSpec:
    """``become`` and ``become_user`` settled: the host's own, else its groups', else the
    playbook's (become only), else off and root. Groups are read in the inventory's order."""
    become, user = spec.become, spec.become_user
    for name in inv.inventory.groups:
        group = inv.inventory.group(name)
        if host in group.hosts:
            become = group.become if become is None else become
            user = group.become_user if user is None else user
    become = playbook if become is None else become
    return spec.model_copy(update={"become": become, "become_user": user or DEFAULT_BECOME_USER})


def _step(
    pb: LoadedPlaybook, index: int, variables: Variables, diffs: dict[Path, str]
) -> StepCommon:
    raw: dict[str, Any] = pb.data["steps"][index]
    origin = Origin(pb.positions, ("steps", index))
    rendered = {
        key: value if key == "tags" else variables.render(value, origin.child(key))
        for key, value in raw.items()
    }
    if isinstance(rendered.get("patch"), dict):
        rendered["patch"] = dict(rendered["patch"])
        _read_diff(pb, index, rendered["patch"], diffs)
    for action, args in list(rendered.items()):
        reader = _local_reader(action)
        if reader is not None and isinstance(args, dict):
            base: KeyPath = ("steps", index, action)
            files = LocalFiles(pb.path.parent.resolve(), pb.positions, base, variables)
            rendered[action] = reader(dict(args), files)
    return _validated(validate_step, step_entry(), rendered, pb.positions, ("steps", index))


def _services(
    pb: LoadedPlaybook, steps: list[tuple[int, StepCommon]], variables: Variables
) -> dict[str, ServiceSpec]:
    """The services the selected steps use, rendered for this host (unused ones are not)."""
    used = {getattr(args_of(step), "service", None) for _, step in steps}
    out: dict[str, ServiceSpec] = {}
    for name in sorted(n for n in used if isinstance(n, str)):
        if name not in pb.data.get("services", {}):
            raise InputError(f"unknown service {name!r}", pb.positions.locate(("steps",)))
        raw = pb.data["services"][name] or {}
        rendered = variables.render(raw, Origin(pb.positions, ("services", name)))
        out[name] = _validated(
            ServiceSpec.model_validate, ServiceSpec, rendered, pb.positions, ("services", name)
        )
    return out


def _plan(
    inv: LoadedInventory,
    pb: LoadedPlaybook,
    host: str,
    extra_vars: Mapping[str, Any],
    indexes: list[int],
    diffs: dict[Path, str],
    problems: Problems,
) -> HostPlan | None:
    values, origins = merge_vars(inv, pb, host, extra_vars)
    variables = Variables(values, origins)
    spec: HostSpec | None = None
    try:
        spec = _host_spec(inv, host, variables, pb.playbook.become)
    except InputError as exc:
        named = exc.position is not None and exc.position.field.startswith(
            format_path(("hosts", host))
        )
        problems.report(exc, None if named else host)
    steps: list[tuple[int, StepCommon]] = []
    for index in indexes:
        try:
            steps.append((index, _step(pb, index, variables, diffs)))
        except InputError as exc:
            problems.report(exc, host)
    services: dict[str, ServiceSpec] = {}
    try:
        services = _services(pb, steps, variables)
    except InputError as exc:
        problems.report(exc, host)
        return None
    resolved = variables.resolved()
    _register_secrets(values, resolved, [*pb.playbook.secret_vars, *inv.inventory.secret_vars])
    for service in services.values():
        masking.register_vars(service.env)
        masking.register(service.api_key)  # None and "" are not registered
    if spec is None or len(steps) != len(indexes):
        return None
    _register_logins(spec)
    return HostPlan(host, spec, resolved, steps, pb.playbook, pb.path, services)


def _register_logins(spec: HostSpec) -> None:
    """The SSH and sudo passwords the host's ``*_env`` variables hold are masked from now
    (sudo's whether or not the inventory says ``become``: ``-b`` may turn it on later)."""
    masking.register_env(spec.password_env)
    masking.register_env(spec.become_password_env)


def _register_secrets(
    written: Mapping[str, Any], resolved: Mapping[str, Any], listed: list[str]
) -> None:
    """Secret variables' values, as written and rendered, are masked in every output from now."""
    masking.register_vars(written, listed)
    masking.register_vars(resolved, listed)


def resolve_collecting(
    inv: LoadedInventory,
    pb: LoadedPlaybook,
    problems: Problems,
    *,
    extra_vars: Mapping[str, Any],
    limit: Sequence[str] | None,
    tags: Iterable[str] | None,
    skip_tags: Iterable[str] | None,
) -> list[HostPlan]:
    for name in set(extra_vars) & set(BUILTIN_VARS):
        message = f"variable {name!r} is built in and cannot be set"
        problems.report(InputError(message, SourcePosition("-e")))
    pattern = pb.playbook.hosts
    hosts = select_hosts(
        inv.inventory, pattern, limit, pattern_position=pb.positions.locate(("hosts",))
    )
    if not hosts:
        limited = f" with --limit {','.join(limit)}" if limit else ""
        raise InputError(
            f"no hosts selected: {pattern!r}{limited} matches no host in {inv.path}",
            pb.positions.locate(("hosts",)),
        )
    check_tags(pb.playbook.steps, tags, skip_tags)
    indexes = [index for index, _ in filter_steps(pb.playbook.steps, tags, skip_tags)]
    if not indexes:
        raise InputError(f"no steps selected in {pb.path} (check --tags / --skip-tags)")
    diffs: dict[Path, str] = {}
    plans = [_plan(inv, pb, host, extra_vars, indexes, diffs, problems) for host in hosts]
    return [plan for plan in plans if plan is not None]


@trace.spanned("config.resolve")
def resolve(
    inv: LoadedInventory,
    pb: LoadedPlaybook,
    *,
    extra_vars: Mapping[str, Any] | None = None,
    limit: Sequence[str] | None = None,
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
) -> list[HostPlan]:
    """One `HostPlan` per selected host, in inventory order, everything rendered and checked.

    Hosts are the playbook's ``hosts`` pattern narrowed by ``limit`` (several ``--limit``
    values are united); steps are filtered by ``tags``/``skip_tags`` (`filter_steps`).
    Variables are merged as `merge_vars` describes. Any problem — an undefined variable in a
    step that will run, a field that is invalid once rendered, a missing ``diff_file`` —
    stops here, before anything runs.

    Raises:
        InputError: the first problem, at the file:line of the string that causes it, with
            the host it was found for.
    """
    return resolve_collecting(
        inv,
        pb,
        Problems(collect=False),
        extra_vars=extra_vars or {},
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
    )


def resolve_hosts(
    inv: LoadedInventory,
    *,
    limit: Sequence[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
) -> list[tuple[str, HostSpec]]:
    """Every inventory host (narrowed by ``limit``) with its rendered, validated settings.

    For commands that run no playbook (``rollback``): variables are merged as in `merge_vars`
    without the playbook layer.

    Raises:
        InputError: a bad ``--limit``, or a host setting that is invalid once rendered.
    """
    hosts = select_hosts(inv.inventory, "all", limit)
    out = []
    for host in hosts:
        values, origins = merge_vars(inv, None, host, extra_vars or {})
        spec = _host_spec(inv, host, Variables(values, origins))
        _register_secrets(values, {}, inv.inventory.secret_vars)
        _register_logins(spec)
        out.append((host, spec))
    return out
