"""Which hosts a run touches (Ansible-style patterns) and which steps it runs (tags).

Host patterns, as in Ansible: terms separated by ``,`` or ``:``; a term is ``all`` (or ``*``),
a host name, a group name, or a glob over host and group names (``gpu-*``); ``!term`` removes
hosts, ``&term`` keeps only hosts also in term. Plain terms are united first, then
intersections, then exclusions, whatever their order; a pattern made only of ``!``/``&`` terms
starts from ``all``. ``--limit`` uses the same syntax and is applied on top.

Names that match nothing are errors, exclusions included: a misspelt ``!canary`` would
otherwise silently deploy to the canary it was meant to spare.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import TypeVar

from deploy.config.errors import suggest
from deploy.config.inventory import Inventory
from deploy.config.steps import StepCommon
from deploy.config.yamlpos import Positions
from deploy.errors import InputError, SourcePosition

#: Steps with this tag run unless explicitly skipped; with ``never``, only when asked for.
ALWAYS = "always"
NEVER = "never"
#: ``--tags all`` means every step except ``never`` ones, as with no ``--tags`` at all.
ALL = "all"
SPECIAL_TAGS = frozenset({ALWAYS, NEVER, ALL})

_GLOB_CHARS = re.compile(r"[*?\[]")

StepT = TypeVar("StepT", bound=StepCommon)


def check_inventory(inventory: Inventory, positions: Positions | None = None) -> None:
    """Refuse groups that make host selection ambiguous or wrong.

    Raises:
        InputError: a group lists an unknown host (at that entry's line), a name is both a
            host and a group, or a group is called ``all``.
    """

    def where(*path: str | int) -> SourcePosition:
        if positions is None:
            return SourcePosition("<inventory>", field=".".join(map(str, path)))
        return positions.locate(("groups", *path))

    hosts = list(inventory.hosts)
    for name in inventory.groups:
        if name in ("all", "*"):
            raise InputError(f"group name {name!r} is reserved (it means every host)", where(name))
        if name in inventory.hosts:
            raise InputError(
                f"{name!r} is both a host and a group: rename one (patterns would be ambiguous)",
                where(name),
            )
        for index, member in enumerate(inventory.group(name).hosts):
            if member in inventory.hosts:
                continue
            if member in inventory.groups:
                message = f"group {name!r} lists {member!r}, which is a group (groups hold hosts)"
            else:
                message = f"group {name!r} lists unknown host {member!r}{suggest(member, hosts)}"
            raw = inventory.groups[name]
            path: tuple[str | int, ...] = (
                (name, index) if isinstance(raw, list) else (name, "hosts", index)
            )
            raise InputError(message, where(*path))


def _split(pattern: str) -> list[str]:
    return [term.strip() for term in re.split(r"[,:]", pattern) if term.strip()]


def _expand(inventory: Inventory, term: str, source: SourcePosition) -> set[str]:
    """The hosts one pattern term (without its ``!``/``&``) stands for."""
    if term in ("all", "*"):
        return set(inventory.hosts)
    if term in inventory.hosts:
        return {term}
    if term in inventory.groups:
        return set(inventory.group(term).hosts)
    if _GLOB_CHARS.search(term):
        found = {h for h in inventory.hosts if fnmatch.fnmatchcase(h, term)}
        for group in inventory.groups:
            if fnmatch.fnmatchcase(group, term):
                found.update(inventory.group(group).hosts)
        if not found:
            raise InputError(f"pattern {term!r} matches no host or group", source)
        return found
    names = [*inventory.hosts, *inventory.groups]
    raise InputError(f"unknown host or group {term!r}{suggest(term, names)}", source)


def _match(inventory: Inventory, pattern: str, source: SourcePosition) -> set[str]:
    terms = _split(pattern)
    if not terms:
        raise InputError(f"empty host pattern {pattern!r}", source)
    plain = [t for t in terms if not t.startswith(("!", "&"))]
    intersect = [t[1:].strip() for t in terms if t.startswith("&")]
    exclude = [t[1:].strip() for t in terms if t.startswith("!")]
    selected: set[str] = set()
    for term in plain or ["all"]:
        selected |= _expand(inventory, term, source)
    for term in intersect:
        selected &= _expand(inventory, term, source)
    for term in exclude:
        selected -= _expand(inventory, term, source)
    return selected


def select_hosts(
    inventory: Inventory,
    pattern: str,
    limit: str | Sequence[str] | None = None,
    *,
    pattern_position: SourcePosition | None = None,
) -> list[str]:
    """The hosts ``pattern`` selects, narrowed by ``limit``, in inventory order.

    ``limit`` may be one pattern or several (several ``--limit`` options: their union).
    The result may be empty (everything excluded); the caller decides whether that is an error.

    Raises:
        InputError: a term names no host or group, or a glob matches nothing; errors in the
            pattern point at ``pattern_position``, errors in the limit at ``--limit``.
    """
    source = pattern_position or SourcePosition("<hosts pattern>")
    selected = _match(inventory, pattern, source)
    limits = [limit] if isinstance(limit, str) else list(limit or [])
    if limits:
        allowed: set[str] = set()
        for item in limits:
            allowed |= _match(inventory, item, SourcePosition("--limit"))
        selected &= allowed
    return [name for name in inventory.hosts if name in selected]


# --- tags ---------------------------------------------------------------------------------


def filter_steps(
    steps: Sequence[StepT],
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
) -> list[tuple[int, StepT]]:
    """The steps to run, with their index in the playbook, after ``--tags``/``--skip-tags``.

    - no ``tags`` (or ``all``): every step, except those tagged ``never``;
    - ``tags``: steps having any of them, plus steps tagged ``always``; a ``never`` step runs
      only if one of its other tags (or ``never`` itself) is asked for;
    - ``skip_tags`` then removes steps having any of them (``always`` ones too, if
      ``always`` is skipped by name).
    """
    wanted = set(tags or ())
    skipped = set(skip_tags or ())
    everything = not wanted or ALL in wanted
    kept: list[tuple[int, StepT]] = []
    for index, step in enumerate(steps):
        own = set(step.tags)
        if own & skipped:
            continue
        if NEVER in own:
            if not own & (wanted - {ALL}):
                continue
        elif not everything and not (own & wanted) and ALWAYS not in own:
            continue
        kept.append((index, step))
    return kept


def check_tags(
    steps: Sequence[StepCommon],
    tags: Iterable[str] | None,
    skip_tags: Iterable[str] | None,
) -> None:
    """Refuse ``--tags``/``--skip-tags`` naming a tag no step has.

    A misspelt ``--skip-tags restart`` would otherwise run the very step it meant to skip.

    Raises:
        InputError: naming the option, the tag and the tags that exist.
    """
    known = sorted({tag for step in steps for tag in step.tags})
    for option, given in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in sorted(set(given or ())):
            if tag in known or tag in SPECIAL_TAGS:
                continue
            available = ", ".join(known) if known else "none"
            raise InputError(
                f"no step has tag {tag!r} (tags: {available}){suggest(tag, known)}",
                SourcePosition(option),
            )
