"""Rolling batches: how a fleet is cut into batches, when a rollout stops, where it left hosts.

A playbook (``serial:``) or the command line (``--serial``) says how many hosts change at a
time, as Ansible does: a count (``2``), a share of the fleet (``"25%"``, rounded down, at least
one host), or a ramp (``[1, "50%"]``: a canary first, then halves; the last size repeats).
``max_fail`` says how many failed hosts a batch may have before the remaining batches are
called off: a count (``1``: more than one fails the rollout) or a share of the batch
(``"20%"``: more than a fifth). With batches and no ``max_fail`` the limit is 0 — a rolling
deploy exists to stop at the first bad host, so that is the safe default.

A host "fails" here when it did not reach the desired state, whatever the reason: a failed
step (rolled back or not), a failed rollback, or a host that could not be reached or was
locked. Pure functions only: `deploy.engine.fleet` does the running.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from deploy.engine.results import HostResult, RunResult
from deploy.errors import InputError

_SIZE = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


@dataclass(frozen=True)
class Size:
    """A number of hosts, either absolute or as a percentage of some total."""

    value: int
    percent: bool = False

    def of(self, total: int, *, at_least: int = 0) -> int:
        """This size for ``total`` hosts: percentages round down (as in Ansible)."""
        count = total * self.value // 100 if self.percent else self.value
        return max(at_least, count)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def parse_size(value: int | str, *, what: str, minimum: int) -> Size:
    """``3`` or ``"3"`` or ``"30%"`` as a `Size`.

    Raises:
        InputError: not a whole number or percentage, below ``minimum``, or above 100%.
    """
    if isinstance(value, bool):
        raise InputError(f"{what}: expected a number or a percentage like '25%', got {value!r}")
    match = _SIZE.match(str(value))
    if match is None:
        raise InputError(f"{what}: expected a number or a percentage like '25%', got {value!r}")
    size = Size(int(match.group(1)), percent=bool(match.group(2)))
    if size.value < minimum:
        raise InputError(f"{what}: must be at least {minimum}, got {value!r}")
    if size.percent and size.value > 100:
        raise InputError(f"{what}: a percentage cannot exceed 100%, got {value!r}")
    return size


def parse_serial(value: int | str | Sequence[int | str]) -> list[Size]:
    """``serial`` from a playbook (a size or a list) or ``--serial`` (comma-separated).

    Raises:
        InputError: an empty list or a bad size.
    """
    items: Sequence[int | str]
    if isinstance(value, str):
        items = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, int):
        items = [value]
    else:
        items = value
    if not items:
        raise InputError("serial: give at least one batch size")
    return [parse_size(item, what="serial", minimum=1) for item in items]


def parse_max_fail(value: int | str) -> Size:
    """``max_fail`` / ``--max-fail``: failed hosts a batch may have (count or % of the batch)."""
    return parse_size(value, what="max_fail", minimum=0)


def plan_batches(names: Sequence[str], serial: Sequence[Size] | None) -> list[list[str]]:
    """Cut ``names`` (in inventory order) into batches; one batch of all without ``serial``."""
    if not serial:
        return [list(names)] if names else []
    batches: list[list[str]] = []
    position = 0
    number = 0
    while position < len(names):
        size = serial[min(number, len(serial) - 1)].of(len(names), at_least=1)
        batches.append(list(names[position : position + size]))
        position += size
        number += 1
    return batches


def failed(host: HostResult) -> bool:
    """Whether ``host`` counts against ``max_fail``: anything but the desired state."""
    return host.exit_code != 0


def exceeds(failures: int, batch_size: int, limit: Size) -> bool:
    """Whether ``failures`` in a batch of ``batch_size`` is more than ``limit`` allows."""
    if limit.percent:
        return failures * 100 > limit.value * batch_size
    return failures > limit.value


#: The states a host can be left in after a run, in the order a summary lists them.
FLEET_STATES = {
    "new state": ("changed", "unchanged", "would change", "restored", "nothing to do"),
    "rolled back": ("rolled back",),
    "failed, nothing changed": ("failed",),
    "never touched": ("not attempted", "skipped"),
    "NEEDS A HUMAN": ("rollback failed", "interrupted"),
}


def fleet_state(run: RunResult) -> dict[str, list[str]]:
    """Host names by the state the run left them in (only the states that occur).

    "new state" is the desired one (for ``deploy rollback``: the state it restored).
    """
    out: dict[str, list[str]] = {}
    for label, outcomes in FLEET_STATES.items():
        names = [h.host for h in run.hosts if h.outcome in outcomes]
        if names:
            out[label] = names
    known = {outcome for outcomes in FLEET_STATES.values() for outcome in outcomes}
    for host in run.hosts:
        if host.outcome not in known:  # an outcome newer than this table: shown as it is
            out.setdefault(host.outcome, []).append(host.host)
    return out
