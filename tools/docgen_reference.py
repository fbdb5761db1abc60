"""``docs/playbooks.md`` and ``docs/inventory.md``: the reference of the two input files."""

from __future__ import annotations

import sys
import textwrap

from pydantic import ValidationError

from deploy import schema
from deploy.config import load, select, services, steps, template
from deploy.config.inventory import GroupSpec, HostSpec, Inventory
from deploy.config.playbook import Playbook
from deploy.config.services import ServiceSpec
from deploy.config.steps import STEP_MODELS, StepCommon
from deploy.remote import connect
from deploy.steps.python_insert import InsertAnchor
from tools.docgen_examples import EXAMPLE_FRAME, INVENTORY_EXAMPLE, SERVICES_EXAMPLE, STEP_EXAMPLES
from tools.docgen_markdown import _NOTICE, _cell, _fence, field_table, markdown, model_rules

# --- docs/playbooks.md ------------------------------------------------------------------------


def step_classes() -> dict[str, type]:
    """Action key -> the registered step class that implements it (for its module docstring):
    the registry's own view (`deploy.steps.step_classes`), so a step registered from outside
    the package is documented as one of ours is."""
    from deploy import steps as implementations

    return dict(implementations.step_classes())


def _step_section(action: str, cls: type | None, shown: dict[str, str]) -> str:
    model = schema.args_model(action)
    parts = [f"### `{action}`", "", schema.step_purpose(action)]
    if cls is not None:
        module = sys.modules[cls.__module__]
        if module.__name__ in shown:
            parts += [
                "",
                f"How it works: see [`{shown[module.__name__]}`](#{shown[module.__name__]}).",
            ]
        else:
            shown[module.__name__] = action
            details = markdown(module.__doc__, 1)
            if details:
                parts += ["", details]
        mutating = getattr(cls, "mutating", False)
        changes = "yes (a failure after it rolls the host back)" if mutating else "no"
        parts += ["", f"Changes the host: {changes}."]
    rules = model_rules(model)
    if rules:
        parts += ["", *[f"Rule: {rule}." for rule in rules]]
    links: dict[type, str] = {InsertAnchor: "mapping (`after` or `before`: a member name)"}
    parts += ["", field_table(model, links), "", _fence(STEP_EXAMPLES[action])]
    return "\n".join(parts)


def render_playbooks() -> str:
    """``docs/playbooks.md``: the playbook file, every step with an example, services."""
    classes = step_classes()
    shown: dict[str, str] = {}
    overview = ["| step | what it does |", "| --- | --- |"]
    overview += [f"| [`{a}`](#{a}) | {_cell(schema.step_purpose(a))} |" for a in STEP_MODELS]
    minimal = EXAMPLE_FRAME + "steps:\n" + textwrap.indent(STEP_EXAMPLES["restart"], "  ")
    parts = [
        "# Playbook reference",
        "",
        _NOTICE,
        "",
        "A playbook (`playbooks/NAME.yaml`, run with `deploy apply NAME`) says which hosts to",
        "change, with which variables, in which steps. A complete real one:",
        "[playbooks/kimi-eagle3.yaml](../playbooks/kimi-eagle3.yaml). Editors validate and",
        "complete playbooks with [schema/playbook.schema.json](../schema/playbook.schema.json)",
        "(`deploy schema` writes it anywhere) when the file's first line names it, as below.",
        "Hosts and variables are described in [inventory.md](inventory.md); what a run does to a",
        "host, rollback and exit codes in [operations.md](operations.md).",
        "",
        "## The file",
        "",
        markdown(Playbook.__doc__),
        "",
        field_table(Playbook, {ServiceSpec: "[service](#services)", StepCommon: "[step](#steps)"}),
        "",
        "A minimal playbook; the step examples below are steps of this one:",
        "",
        _fence(minimal),
        "",
        "## Templating",
        "",
        markdown(template.__doc__),
        "",
        markdown(load.__doc__, 2, 3),
        "",
        "## Steps",
        "",
        markdown(steps.__doc__, 1, 3),
        "",
        "Keys every step accepts besides its action:",
        "",
        field_table(StepCommon),
        "",
        "The actions:",
        "",
        overview[0],
        "\n".join(overview[1:]),
        "",
        "### Choosing steps: tags",
        "",
        markdown(select.filter_steps.__doc__),
        "",
        markdown(select.check_tags.__doc__, 1),
        "",
        *[
            part
            for action in STEP_MODELS
            for part in (_step_section(action, classes.get(action), shown), "")
        ],
        "## Services",
        "",
        markdown(services.__doc__),
        "",
        markdown(ServiceSpec.__doc__),
        "",
        *[f"Rule: {rule}." for rule in _service_rules()],
        "",
        field_table(ServiceSpec),
        "",
        _fence(SERVICES_EXAMPLE),
        "",
    ]
    return "\n".join(parts)


def _service_rules() -> list[str]:
    """ServiceSpec's model rules, probed with each manager (the minimal input is valid)."""
    rules = []
    for manager in ("process", "systemd"):
        try:
            ServiceSpec.model_validate({"manager": manager})
        except ValidationError as exc:
            rules += [str(e["msg"]).removeprefix("Value error, ") for e in exc.errors()]
    return rules


# --- docs/inventory.md ------------------------------------------------------------------------


def render_inventory() -> str:
    """``docs/inventory.md``: hosts, groups, variables and their precedence, patterns, keys."""
    links: dict[type, str] = {HostSpec: "[host](#host-keys)", GroupSpec: "[group](#group-keys)"}
    parts = [
        "# Inventory reference",
        "",
        _NOTICE,
        "",
        "The inventory is `hosts.yaml` in the current directory, or the file given with",
        "`-i FILE` or `$DEPLOY_INVENTORY`. Editors validate and complete it with",
        "[schema/hosts.schema.json](../schema/hosts.schema.json) when its first line names it,",
        "as below. Playbooks are described in [playbooks.md](playbooks.md).",
        "",
        _fence(INVENTORY_EXAMPLE),
        "",
        "## Top-level keys",
        "",
        markdown(Inventory.__doc__),
        "",
        field_table(Inventory, links),
        "",
        "## Host keys",
        "",
        markdown(HostSpec.__doc__),
        "",
        field_table(HostSpec),
        "",
        "## Group keys",
        "",
        markdown(GroupSpec.__doc__) + " A group may also be just a list of host names.",
        "",
        field_table(GroupSpec),
        "",
        "## Variables and their precedence",
        "",
        markdown(load.merge_vars.__doc__, 1),
        "",
        "How values are templated: [playbooks.md](playbooks.md#templating).",
        "",
        "## Host patterns",
        "",
        "A playbook's `hosts:` and the `-l/--limit` option select hosts with patterns.",
        "",
        markdown(select.__doc__, 1),
        "",
        "## Host keys and connections",
        "",
        markdown(connect.__doc__, 0, 4),
        "",
    ]
    return "\n".join(parts)
