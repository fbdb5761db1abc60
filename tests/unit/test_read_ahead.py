"""What the engine hands the host to fetch with the lock comes from the steps (`Step.reads`,
`Step.speculate`), not from a list of step kinds in the engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import Field

from deploy.config.inventory import StrictModel
from deploy.config.load import load_inventory, load_playbook
from deploy.config.resolve import HostPlan, resolve
from deploy.engine.host_run import read_ahead
from deploy.steps import register, unregister
from deploy.steps.base import Planned, Step, StepContext

PLAYBOOK = """\
name: reads
hosts: all
steps:
  - backup: {path: /etc/a.conf}
  - python_insert: {path: /srv/m.py, class: C, code: "def f(self): pass"}
  - verify_python: {path: /srv/m.py, compiles: true}
  - verify_tail: {path: /srv/m.py, last_line: "x = 1"}
  - backup: {path: /etc/a.conf}
  - verify_command: {run: "true"}
  - append: {path: /etc/later.conf, text: "late"}
"""


def _plan(tmp_path: Path, playbook: str) -> HostPlan:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  h1: {state_dir: /var/lib/dx}\n")
    (tmp_path / "p.yaml").write_text(playbook)
    (plan,) = resolve(load_inventory(tmp_path / "hosts.yaml"), load_playbook(tmp_path / "p.yaml"))
    return plan


def test_the_leading_confined_steps_reads_and_checks_are_sent_with_the_lock(
    tmp_path: Path,
) -> None:
    paths, commands = read_ahead(_plan(tmp_path, PLAYBOOK))
    # in order, once each; the command step ends the prefix (it may change any file)
    assert paths == ["/etc/a.conf", "/srv/m.py"]
    (command,) = commands
    assert "/srv/m.py" in command and "/var/lib/dx/compiled" in command


def test_a_check_without_a_cache_or_a_relative_path_is_not_sent_ahead(tmp_path: Path) -> None:
    playbook = PLAYBOOK.replace("compiles: true", "compiles: true, compile_cache: false")
    assert read_ahead(_plan(tmp_path, playbook))[1] == []
    relative = PLAYBOOK.replace("/srv/m.py", "srv/m.py")
    assert read_ahead(_plan(tmp_path, relative)) == (["/etc/a.conf"], [])


class PeekArgs(StrictModel):
    """Read two files (a throwaway step)."""

    first: str = Field(description="A file.")
    second: str = Field(description="Another file.")


class PeekStep(Step[PeekArgs]):
    kind = "peek"
    example = "- peek: {first: /a, second: /b}\n"
    confined = True

    def reads(self) -> list[str]:
        return [self.args.first, self.args.second]

    def plan(self, ctx: StepContext) -> Planned:
        return Planned(summary="peeked", noop=True)


@pytest.fixture
def peek() -> Iterator[None]:
    register(PeekStep)
    try:
        yield
    finally:
        unregister("peek")


def test_a_new_steps_reads_are_fetched_ahead_without_touching_the_engine(
    tmp_path: Path, peek: None
) -> None:
    playbook = "name: p\nhosts: all\nsteps:\n  - peek: {first: /x/1, second: /x/2}\n"
    assert read_ahead(_plan(tmp_path, playbook)) == (["/x/1", "/x/2"], [])
