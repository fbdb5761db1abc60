"""A step type is one module: registering a throwaway step, defined here and touching no other
file, makes it part of the playbook language, the docs and the JSON Schema.

``tests/integration/test_step_registration_run.py`` runs the same step on a real host, rolls it
back through its own journal record and undo handler, and so proves the rest (runnable,
undoable).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import Field

from deploy import schema
from deploy.config.inventory import StrictModel
from deploy.config.load import load_inventory, load_playbook
from deploy.config.resolve import resolve
from deploy.config.steps import STEP_MODELS, args_of
from deploy.errors import CheckFailed, InputError
from deploy.statedir import records
from deploy.statedir.records import Done, Record, Undone
from deploy.steps import build_step, register, step_class, undo_for, unregister
from deploy.steps.base import Planned, Recorder, RecordUndo, Step, StepContext
from deploy.steps.files import before_change
from tools import docgen

# --- the throwaway step: everything a step type declares, in one place --------------------------


class StampArgs(StrictModel):
    """Write a marker file naming the run (a throwaway step defined by a test)."""

    path: str = Field(description="Absolute path of the marker file on the host.")
    text: str = Field(default="stamped", description="What the marker says.")


@dataclass(frozen=True, kw_only=True)
class StampIntent(Record):
    """Fsynced before the marker is written: undo removes it."""

    EVENT = "intent"
    OP = "stamp"
    step: int = 0
    path: str


class StampUndo(RecordUndo):
    """Undo of ``stamp`` intents: remove the markers, newest first."""

    op = "stamp"

    def restore(self, records: list[dict[str, Any]], journal: Recorder) -> list[str]:
        from deploy.remote.host import quote

        lines = []
        for event in reversed(records):
            path = str(event["path"])
            self.remote.run(f"rm -f -- {quote(path)}", timeout=30)
            journal.write(Undone(op="stamp", path=path, action="removed"))
            lines.append(f"removed {path}")
        return lines


class StampStep(Step[StampArgs]):
    kind = "stamp"
    example = """\
- name: Leave a marker
  stamp: {path: /tmp/deploy-marker, text: hello}
"""
    records = (StampIntent, Done)
    mutating = True

    @classmethod
    def undo_handler(cls) -> type[RecordUndo]:
        return StampUndo

    def describe(self) -> str:
        return f"stamp {self.args.path}"

    def plan(self, ctx: StepContext) -> Planned:
        return Planned(summary=f"write {self.args.text!r} to {self.args.path}")

    def apply(self, ctx: StepContext, planned: Planned) -> None:
        from deploy.remote.host import quote

        if ctx.check_mode:
            return
        before_change(ctx)
        ctx.journal.write(StampIntent(step=ctx.step_index, path=self.args.path))
        ctx.changed = True
        ctx.remote.run(f"printf %s {quote(self.args.text)} > {quote(self.args.path)}", timeout=30)
        ctx.journal.write(Done(op="stamp", step=ctx.step_index, path=self.args.path))

    def verify(self, ctx: StepContext, planned: Planned) -> None:
        from deploy.remote.host import quote

        found = ctx.remote.run(f"cat -- {quote(self.args.path)}", timeout=30).stdout
        if found != self.args.text:
            raise CheckFailed(f"{self.args.path} holds {found!r}, not {self.args.text!r}")


@pytest.fixture
def stamp() -> Iterator[type[StampStep]]:
    """The throwaway step, registered through the public path for one test only."""
    register(StampStep)
    try:
        yield StampStep
    finally:
        unregister("stamp")


PLAYBOOK = """\
name: stamped
hosts: all
steps:
  - name: Leave a marker
    stamp: {path: "{{ marker }}", text: "{{ greeting }}"}
"""

INVENTORY = """\
hosts:
  h1: {vars: {marker: /tmp/m1, greeting: hi}}
"""


def _files(tmp_path: Path, playbook: str = PLAYBOOK) -> tuple[Path, Path]:
    (tmp_path / "hosts.yaml").write_text(INVENTORY, encoding="utf-8")
    (tmp_path / "stamped.yaml").write_text(playbook, encoding="utf-8")
    return tmp_path / "hosts.yaml", tmp_path / "stamped.yaml"


def test_an_unregistered_action_is_an_unknown_step(tmp_path: Path) -> None:
    _, playbook = _files(tmp_path)
    with pytest.raises(InputError, match=r"stamped.yaml:5:5 .*unknown step 'stamp'"):
        load_playbook(playbook)


def test_a_registered_step_is_accepted_in_a_playbook(
    tmp_path: Path, stamp: type[StampStep]
) -> None:
    inventory, playbook = _files(tmp_path)
    (plan,) = resolve(load_inventory(inventory), load_playbook(playbook))
    ((index, entry),) = plan.steps
    args = args_of(entry)
    assert isinstance(args, StampArgs)
    assert (args.path, args.text) == ("/tmp/m1", "hi")  # rendered per host
    step = build_step(entry, index)
    assert isinstance(step, StampStep) and step.args is args
    assert step_class("stamp") is stamp
    # its record kind is readable, and the rollback knows who undoes it
    line = records.encode(StampIntent(path="/tmp/m1", seq=1))
    assert records.decode_line(line.decode()) == StampIntent(path="/tmp/m1", seq=1)
    assert undo_for("stamp") is StampUndo


def test_a_registered_steps_arguments_are_checked_with_file_and_line(
    tmp_path: Path, stamp: type[StampStep]
) -> None:
    _, playbook = _files(tmp_path, PLAYBOOK.replace("text:", "txet:"))
    with pytest.raises(InputError) as caught:
        load_playbook(playbook)
    assert str(caught.value).endswith(
        "stamped.yaml:5:35 steps[0].stamp.txet: unknown key 'txet' (allowed: path, text) "
        "(did you mean 'text'?)"
    )


def test_a_registered_step_is_in_the_docs_and_the_schema(stamp: type[StampStep]) -> None:
    generated = docgen.generated()
    page = generated["docs/playbooks.md"]
    assert "### `stamp`" in page
    assert "Write a marker file naming the run" in page  # its purpose, from its arguments
    assert "stamp: {path: /tmp/deploy-marker, text: hello}" in page  # its example
    section = page.split("### `stamp`", 1)[1].split("\n#", 1)[0]
    # Its class is found through the registry, not by walking deploy.steps' subclasses: the
    # lines only a known class gives (its module's "how it works", whether it changes the host).
    assert "runs the same step on a real host, rolls it" in section
    assert "Changes the host: yes" in section
    document = json.loads(generated["schema/playbook.schema.json"])
    assert "StampStep" in document["$defs"]
    validator = jsonschema.Draft202012Validator(document)
    good = {"name": "x", "hosts": "all", "steps": [{"stamp": {"path": "/tmp/m"}}]}
    assert not list(validator.iter_errors(good))
    bad = {"name": "x", "hosts": "all", "steps": [{"stamp": {"path": "/tmp/m", "txet": 1}}]}
    assert list(validator.iter_errors(bad))
    assert schema.step_purpose("stamp").startswith("Write a marker file")


def test_unregistering_leaves_the_language_as_it_was(tmp_path: Path) -> None:
    before = (list(STEP_MODELS), docgen.generated()["schema/playbook.schema.json"])
    register(StampStep)
    unregister("stamp")
    assert (list(STEP_MODELS), docgen.generated()["schema/playbook.schema.json"]) == before
    with pytest.raises(ValueError, match="unknown record 'intent' op 'stamp'"):
        records.decode_line(records.encode(StampIntent(path="/x", seq=1)).decode())


def test_a_step_must_declare_its_arguments_and_example() -> None:
    class Bare(Step[StampArgs]):
        kind = "bare"

    with pytest.raises(ValueError, match="declares kind, its arguments"):
        register(Bare)
    assert "bare" not in STEP_MODELS
    with pytest.raises(ValueError, match="already declared"):
        register(step_class("patch"))


def test_importing_the_step_catalogue_loads_no_remote_layer() -> None:
    """Validation imports every step module: none may pull in SSH (paramiko/fabric) or the
    service machinery, or ``deploy validate`` pays for them."""
    code = (
        "import sys\n"
        "import deploy.config.load, deploy.steps\n"
        "loaded = [m for m in sys.modules if m.startswith(('deploy.remote', 'paramiko', "
        "'fabric', 'deploy.services'))]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
