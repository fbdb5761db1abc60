"""Host patterns (Ansible-style) and tag filtering."""

from __future__ import annotations

import pytest

from deploy.config.inventory import Inventory
from deploy.config.select import check_tags, filter_steps, select_hosts
from deploy.config.steps import STEP_MODELS, StepCommon
from deploy.errors import InputError, SourcePosition
from deploy.steps.backup import BackupArgs

INVENTORY = Inventory.model_validate(
    {
        "hosts": {name: {} for name in ("gpu-1", "gpu-2", "gpu-3", "cpu-1", "db-1")},
        "groups": {
            "gpus": ["gpu-1", "gpu-2", "gpu-3"],
            "canary": {"hosts": ["gpu-2"]},
            "staging": ["gpu-1", "cpu-1"],
        },
    }
)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("all", ["gpu-1", "gpu-2", "gpu-3", "cpu-1", "db-1"]),
        ("*", ["gpu-1", "gpu-2", "gpu-3", "cpu-1", "db-1"]),
        ("db-1", ["db-1"]),
        ("gpus", ["gpu-1", "gpu-2", "gpu-3"]),
        ("canary", ["gpu-2"]),
        ("gpu-*", ["gpu-1", "gpu-2", "gpu-3"]),
        ("*-1", ["gpu-1", "cpu-1", "db-1"]),
        ("gpu-[12]", ["gpu-1", "gpu-2"]),
        ("stag*", ["gpu-1", "cpu-1"]),  # a glob over group names expands to their hosts
        ("db-1,canary", ["gpu-2", "db-1"]),  # inventory order, not pattern order
        ("db-1:canary", ["gpu-2", "db-1"]),
        ("gpus:!canary", ["gpu-1", "gpu-3"]),
        ("!canary,gpus", ["gpu-1", "gpu-3"]),  # order of terms does not matter
        ("gpus:&staging", ["gpu-1"]),
        ("gpus,db-1:&staging:!gpu-1", []),
        ("!gpus", ["cpu-1", "db-1"]),  # only exclusions: start from all
        ("&staging", ["gpu-1", "cpu-1"]),
        (" gpus , !gpu-3 ", ["gpu-1", "gpu-2"]),
    ],
)
def test_patterns(pattern: str, expected: list[str]) -> None:
    assert select_hosts(INVENTORY, pattern, None) == expected


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpu-2", ["gpu-2"]),
        (["gpu-3", "gpu-1"], ["gpu-1", "gpu-3"]),  # several --limit: union
        ("all:!canary", ["gpu-1", "gpu-3"]),
        ("db-1", []),  # outside the pattern: nothing
        ([], ["gpu-1", "gpu-2", "gpu-3"]),
    ],
)
def test_limit_narrows_the_pattern(limit: str | list[str], expected: list[str]) -> None:
    assert select_hosts(INVENTORY, "gpus", limit) == expected


@pytest.mark.parametrize(
    ("pattern", "limit", "expected"),
    [
        (
            "gpus:gpu-4",
            None,
            "pb.yaml:2:8 hosts: unknown host or group 'gpu-4' (did you mean 'gpu-3'?)",
        ),
        (
            "gpus:!canry",
            None,
            "pb.yaml:2:8 hosts: unknown host or group 'canry' (did you mean 'canary'?)",
        ),
        ("web-*", None, "pb.yaml:2:8 hosts: pattern 'web-*' matches no host or group"),
        ("zzz", None, "pb.yaml:2:8 hosts: unknown host or group 'zzz'"),
        (" , ", None, "pb.yaml:2:8 hosts: empty host pattern ' , '"),
        ("gpus", "gpu-9", "--limit: unknown host or group 'gpu-9' (did you mean 'gpu-3'?)"),
    ],
)
def test_unknown_names_are_errors(pattern: str, limit: str | None, expected: str) -> None:
    where = SourcePosition("pb.yaml", 2, 8, "hosts")
    with pytest.raises(InputError) as info:
        select_hosts(INVENTORY, pattern, limit, pattern_position=where)
    assert str(info.value) == expected


def step(*tags: str) -> StepCommon:
    return STEP_MODELS["backup"](backup=BackupArgs(path="/x"), tags=list(tags))


STEPS = [
    step(),
    step("files"),
    step("restart"),
    step("always"),
    step("never", "debug"),
    step("files", "restart"),
]


@pytest.mark.parametrize(
    ("tags", "skip", "expected"),
    [
        (None, None, [0, 1, 2, 3, 5]),  # 'never' steps need asking for
        ({"all"}, None, [0, 1, 2, 3, 5]),
        ({"files"}, None, [1, 3, 5]),  # 'always' is kept
        ({"restart", "files"}, None, [1, 2, 3, 5]),
        ({"debug"}, None, [3, 4]),
        ({"never"}, None, [3, 4]),
        (None, {"restart"}, [0, 1, 3]),
        ({"files"}, {"restart"}, [1, 3]),
        ({"files"}, {"always"}, [1, 5]),
        (set(), set(), [0, 1, 2, 3, 5]),
    ],
)
def test_filter_steps(tags: set[str] | None, skip: set[str] | None, expected: list[int]) -> None:
    kept = filter_steps(STEPS, tags, skip)
    assert [index for index, _ in kept] == expected
    assert all(STEPS[index] is s for index, s in kept)


@pytest.mark.parametrize(
    ("tags", "skip", "expected"),
    [
        (
            {"fils"},
            None,
            "--tags: no step has tag 'fils' (tags: always, debug, files, never,"
            " restart) (did you mean 'files'?)",
        ),
        (
            None,
            {"restat"},
            "--skip-tags: no step has tag 'restat' (tags: always, debug, files,"
            " never, restart) (did you mean 'restart'?)",
        ),
    ],
)
def test_unknown_tags_are_errors(
    tags: set[str] | None, skip: set[str] | None, expected: str
) -> None:
    with pytest.raises(InputError) as info:
        check_tags(STEPS, tags, skip)
    assert str(info.value) == expected


def test_known_and_special_tags_pass() -> None:
    check_tags(STEPS, {"files", "all", "always"}, {"never"})
