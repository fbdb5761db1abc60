"""The config door: load, merge variables, resolve per-host plans, validate everything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy.config.load import (
    HostPlan,
    find_playbook,
    load_inventory,
    load_playbook,
    parse_extra_vars,
    resolve,
    resolve_hosts,
    validate_all,
)
from deploy.config.steps import STEP_MODELS, action_of, args_of
from deploy.errors import InputError

PatchStep = STEP_MODELS["patch"]
VerifyCommandStep = STEP_MODELS["verify_command"]

INVENTORY = """\
hosts:
  gpu-1:
    address: 10.0.0.1
    port: "{{ ssh_port }}"
    vars:
      sglang_root: /opt/sglang
  gpu-2:
    address: 10.0.0.2
    user: "{{ login }}"
  cpu-1:
groups:
  gpus: [gpu-1, gpu-2]
  canary:
    hosts: [gpu-1]
    vars: {tp: 4}
vars:
  ssh_port: 2222
  login: ops
  sglang_root: /srv/sglang
"""

PLAYBOOK = """\
name: kimi
hosts: gpus
vars:
  model_file: "{{ sglang_root }}/python/sglang/srt/models/kimi_k25.py"
  tp: 8
steps:
  - name: back up on {{ inventory_hostname }}
    backup: {path: "{{ model_file }}"}
  - patch: {path: "{{ model_file }}", diff_file: fixes/kimi.diff}
    tags: [files]
  - verify_command: {run: "echo {{ tp }}", expect_exit: "{{ tp }}", timeout: "{{ tp }}"}
    tags: [check]
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "playbooks" / "fixes").mkdir(parents=True)
    (tmp_path / "hosts.yaml").write_text(INVENTORY)
    (tmp_path / "playbooks" / "kimi.yaml").write_text(PLAYBOOK)
    (tmp_path / "playbooks" / "fixes" / "kimi.diff").write_text("--- a\n+++ b\n")
    return tmp_path


def plans(tree: Path, playbook: str = "kimi.yaml", **options: Any) -> list[HostPlan]:
    inv = load_inventory(tree / "hosts.yaml")
    pb = load_playbook(tree / "playbooks" / playbook)
    return resolve(inv, pb, **options)


def error(tree: Path, playbook: str = "kimi.yaml", **options: Any) -> str:
    with pytest.raises(InputError) as info:
        plans(tree, playbook, **options)
    text = str(info.value)
    assert "\n" not in text
    return text.replace(str(tree) + "/", "")


def test_resolve_renders_and_validates_per_host(tree: Path) -> None:
    gpu1, gpu2 = plans(tree)
    assert (gpu1.name, gpu2.name) == ("gpu-1", "gpu-2")
    assert gpu1.spec.port == 2222  # "{{ ssh_port }}" rendered, then coerced to int
    assert gpu2.spec.user == "ops"
    assert gpu1.vars["model_file"] == "/opt/sglang/python/sglang/srt/models/kimi_k25.py"
    assert gpu2.vars["model_file"] == "/srv/sglang/python/sglang/srt/models/kimi_k25.py"
    assert gpu1.vars["tp"] == 4 and gpu2.vars["tp"] == 8  # group var beats playbook var
    assert [index for index, _ in gpu1.steps] == [0, 1, 2]
    backup = gpu1.steps[0][1]
    assert backup.name == "back up on gpu-1"
    check = gpu1.steps[2][1]
    assert isinstance(check, VerifyCommandStep)
    assert check.verify_command.expect_exit == 4 and check.verify_command.timeout == 4.0
    assert gpu1.playbook.name == "kimi"
    assert gpu1.playbook_path == tree / "playbooks" / "kimi.yaml"


def test_diff_file_is_read_relative_to_the_playbook(tree: Path) -> None:
    patch = plans(tree)[0].steps[1][1]
    assert isinstance(patch, PatchStep) and action_of(patch) == "patch"
    assert args_of(patch) == patch.patch
    assert patch.patch.diff == "--- a\n+++ b\n"
    assert patch.patch.diff_file is None


def test_missing_diff_file_points_at_its_key(tree: Path) -> None:
    (tree / "playbooks" / "fixes" / "kimi.diff").unlink()
    assert error(tree) == (
        "playbooks/kimi.yaml:9:50 steps[1].patch.diff_file: diff file not found:"
        " playbooks/fixes/kimi.diff (host gpu-1)"
    )


def test_undefined_variable_in_a_step_names_file_line_and_host(tree: Path) -> None:
    text = PLAYBOOK.replace('run: "echo {{ tp }}"', 'run: "echo {{ model }}"')
    (tree / "playbooks" / "kimi.yaml").write_text(text)
    assert error(tree) == (
        "playbooks/kimi.yaml:11:27 steps[2].verify_command.run: undefined variable 'model'"
        " (did you mean 'model_file'?) (host gpu-1)"
    )


def test_undefined_variable_in_a_skipped_step_is_not_an_error(tree: Path) -> None:
    text = PLAYBOOK.replace('run: "echo {{ tp }}"', 'run: "echo {{ model }}"')
    (tree / "playbooks" / "kimi.yaml").write_text(text)
    got = plans(tree, skip_tags={"check"})
    assert [index for index, _ in got[0].steps] == [0, 1]


def test_value_invalid_after_templating_is_reported_with_host(tree: Path) -> None:
    assert error(tree, extra_vars=parse_extra_vars(["tp=many"])) == (
        "playbooks/kimi.yaml:11:57 steps[2].verify_command.expect_exit: expected an integer,"
        " got 'many' (+1 more) (host gpu-1)"
    )
    assert error(tree, extra_vars=parse_extra_vars(["ssh_port=ssh"])) == (
        "hosts.yaml:4:11 hosts.gpu-1.port: expected an integer, got 'ssh'"
    )


@pytest.mark.parametrize(
    ("field", "written", "value"),
    [
        ("port", '"{{ n }}"', 2200),
        ("connect_timeout", '"{{ n }}.5"', 2200.5),
        ("accept_new_host_keys", '"{{ yes }}"', True),
    ],
)
def test_templated_scalars_are_coerced(tree: Path, field: str, written: str, value: Any) -> None:
    (tree / "hosts.yaml").write_text(
        f"hosts:\n  gpu-1:\n    {field}: {written}\ngroups:\n  gpus: [gpu-1]\n"
        "vars: {n: 2200, 'yes': true, sglang_root: /x}\n"
    )
    assert getattr(plans(tree)[0].spec, field) == value
    assert getattr(load_inventory(tree / "hosts.yaml").inventory.host("gpu-1"), field) == (
        written.strip('"')
    )


def test_variable_cycle_is_an_error(tree: Path) -> None:
    extra = parse_extra_vars(["sglang_root={{ model_file }}"])
    assert error(tree, limit=["gpu-2"], extra_vars=extra) == (
        "playbooks/kimi.yaml:4:15 vars.model_file: variable cycle:"
        " model_file -> sglang_root -> model_file (host gpu-2)"
    )


# --- precedence ------------------------------------------------------------------------------

PRECEDENCE_INVENTORY = """\
hosts:
  h:
    vars: {level: host}
groups:
  b_group:
    hosts: [h]
    vars: {level: b_group}
  a_group:
    hosts: [h]
    vars: {level: a_group}
  other:
    hosts: []
    vars: {level: other}
vars: {level: inventory}
"""


def test_precedence_extra_host_group_inventory_playbook(tmp_path: Path) -> None:
    """-e > host vars > group vars (alphabetical, later wins) > inventory vars > playbook vars."""
    inventory = tmp_path / "hosts.yaml"
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(
        "name: p\nhosts: h\nvars: {level: playbook}\n"
        "steps:\n  - verify_command: {run: 'echo {{ level }}'}\n"
    )

    def level(text: str, extra: list[str]) -> str:
        inventory.write_text(text)
        plan = resolve(
            load_inventory(inventory), load_playbook(playbook), extra_vars=parse_extra_vars(extra)
        )[0]
        step = plan.steps[0][1]
        assert isinstance(step, VerifyCommandStep)
        assert step.verify_command.run == f"echo {plan.vars['level']}"
        return str(plan.vars["level"])

    text = PRECEDENCE_INVENTORY
    assert level(text, ["level=first", "level=extra"]) == "extra"
    assert level(text, []) == "host"
    text = text.replace("    vars: {level: host}\n", "")
    assert level(text, []) == "b_group"  # b after a: the later group wins, not file order
    text = text.replace("    vars: {level: b_group}\n", "")
    assert level(text, []) == "a_group"  # 'other' does not hold h
    text = text.replace("    vars: {level: a_group}\n", "")
    assert level(text, []) == "inventory"
    text = text.replace("vars: {level: inventory}\n", "")
    assert level(text, []) == "playbook"


def test_builtin_variables(tree: Path) -> None:
    plan = plans(tree)[0]
    assert plan.vars["inventory_hostname"] == "gpu-1"
    assert plan.vars["playbook_dir"] == str((tree / "playbooks").resolve())


# --- -e --------------------------------------------------------------------------------------


def test_extra_vars_parsing(tmp_path: Path) -> None:
    extra_file = tmp_path / "extra.yaml"
    extra_file.write_text("tp: 16\nflags: [a, b]\n")
    parsed = parse_extra_vars(["a=1", "b=x=y", "empty=", f"@{extra_file}", "a=2"])
    assert dict(parsed) == {"a": "2", "b": "x=y", "empty": "", "tp": 16, "flags": ["a", "b"]}
    assert str(parsed.origins["tp"].locate()) == f"{extra_file}:1:5"


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("novalue", "-e: expected NAME=VALUE or @FILE.yaml, got 'novalue'"),
        ("=x", "-e: expected NAME=VALUE or @FILE.yaml, got '=x'"),
        ("my-var=1", "-e: expected NAME=VALUE or @FILE.yaml, got 'my-var=1'"),
        ("inventory_hostname=x", "-e: variable 'inventory_hostname' is built in and cannot be set"),
        ("@/nonexistent/x.yaml", "-e: extra vars file not found: /nonexistent/x.yaml"),
    ],
)
def test_extra_vars_errors(item: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        parse_extra_vars([item])
    assert str(info.value) == expected


def test_extra_vars_file_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text("- a\n")
    with pytest.raises(InputError) as info:
        parse_extra_vars([f"@{path}"])
    assert str(info.value) == f"{path}:1:1: expected a mapping at the top level, got a list"


# --- hosts, tags, files ------------------------------------------------------------------------


def test_limit_and_tags(tree: Path) -> None:
    got = plans(tree, limit=["gpu-2"], tags={"files"})
    assert [p.name for p in got] == ["gpu-2"]
    assert [index for index, _ in got[0].steps] == [1]
    assert error(tree, limit=["cpu-1"]) == (
        "playbooks/kimi.yaml:2:8 hosts: no hosts selected: 'gpus' with --limit cpu-1 matches"
        " no host in hosts.yaml"
    )
    assert error(tree, tags={"fils"}) == (
        "--tags: no step has tag 'fils' (tags: check, files) (did you mean 'files'?)"
    )


def test_find_playbook(tree: Path) -> None:
    books = tree / "playbooks"
    assert find_playbook("kimi", books) == books / "kimi.yaml"
    assert find_playbook("kimi.yaml", books) == books / "kimi.yaml"
    assert find_playbook(str(books / "kimi.yaml"), Path("/elsewhere")) == books / "kimi.yaml"
    with pytest.raises(InputError) as info:
        find_playbook("kimmi", books)
    assert str(info.value) == "playbook not found: kimmi (available: kimi) (did you mean 'kimi'?)"
    with pytest.raises(InputError) as info:
        find_playbook("x", tree / "none")
    assert str(info.value) == f"playbook not found: x (no playbooks in {tree}/none)"


def test_validate_all_reports_every_problem_at_once(tree: Path) -> None:
    assert validate_all(tree / "hosts.yaml", tree / "playbooks") == []
    books = tree / "playbooks"
    (books / "broken.yaml").write_text("name: b\nhosts: all\nsteps:\n  - frob: {}\n  - backup: 1\n")
    (books / "needs-e.yaml").write_text(
        "name: n\nhosts: gpus\nsteps:\n  - backup: {path: '{{ target }}'}\n"
        "  - append: {path: '{{ target }}', text: x}\n"
    )
    problems = [p.replace(str(tree) + "/", "") for p in validate_all(tree / "hosts.yaml", books)]
    assert problems == [
        "playbooks/broken.yaml:4:5 steps[0].frob: unknown step 'frob' (steps: backup,"
        " python_insert, patch, append, lineinfile, copy, template, verify_python, verify_tail, verify_command, restart,"
        " stop, start, wait_healthy, smoke, gate_throughput)",
        "playbooks/broken.yaml:5:13 steps[1].backup: expected a mapping, got an integer",
        "playbooks/needs-e.yaml:4:20 steps[0].backup.path: undefined variable 'target'"
        " (define it in vars or pass -e target=...) (hosts gpu-1, gpu-2)",
        "playbooks/needs-e.yaml:5:20 steps[1].append.path: undefined variable 'target'"
        " (define it in vars or pass -e target=...) (hosts gpu-1, gpu-2)",
    ]


def test_validate_all_with_broken_inventory(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {port: x, usr: y}\n")
    problems = validate_all(tmp_path / "hosts.yaml", tmp_path / "playbooks")
    assert [p.replace(str(tmp_path) + "/", "") for p in problems] == [
        "hosts.yaml:2:13 hosts.a.port: expected an integer, got 'x'",
        "hosts.yaml:2:16 hosts.a.usr: unknown key 'usr' (allowed: address, port, user,"
        " identity_file, known_hosts, ssh_config, accept_new_host_keys, password_env,"
        " become, become_user, become_password_env, connect_timeout, lock_timeout, compression, connect_ahead, state_dir, vars)"
        " (did you mean 'user'?)",
        "playbooks: no playbooks found (*.yaml)",
    ]


def test_validate_all_lists_every_field_of_a_step_invalid_after_templating(tree: Path) -> None:
    (tree / "playbooks" / "kimi.yaml").write_text(
        "name: k\nhosts: canary\nvars: {n: many}\nsteps:\n"
        "  - verify_command: {run: x, expect_exit: '{{ n }}', timeout: '{{ n }}'}\n"
    )
    found = validate_all(tree / "hosts.yaml", tree / "playbooks")
    problems = [p.replace(str(tree) + "/", "") for p in found]
    assert problems == [
        "playbooks/kimi.yaml:5:43 steps[0].verify_command.expect_exit: expected an integer,"
        " got 'many' (host gpu-1)",
        "playbooks/kimi.yaml:5:63 steps[0].verify_command.timeout: expected a number,"
        " got 'many' (host gpu-1)",
    ]


def test_unused_variable_that_cannot_render_is_kept_as_written(tree: Path) -> None:
    text = PLAYBOOK.replace("  tp: 8\n", "  tp: 8\n  later: '{{ not_defined_here }}'\n")
    (tree / "playbooks" / "kimi.yaml").write_text(text)
    assert plans(tree)[0].vars["later"] == "{{ not_defined_here }}"


def test_resolve_hosts_without_a_playbook(tree: Path) -> None:
    inv = load_inventory(tree / "hosts.yaml")
    hosts = resolve_hosts(inv)
    assert [name for name, _ in hosts] == ["gpu-1", "gpu-2", "cpu-1"]
    assert hosts[0][1].port == 2222 and hosts[1][1].user == "ops"
    assert [name for name, _ in resolve_hosts(inv, limit=["gpus:!canary"])] == ["gpu-2"]
    (tree / "hosts.yaml").write_text("hosts:\n  a: {port: '{{ p }}'}\n")
    with pytest.raises(InputError) as info:
        resolve_hosts(load_inventory(tree / "hosts.yaml"))
    assert str(info.value).replace(str(tree) + "/", "") == (
        "hosts.yaml:2:13 hosts.a.port: undefined variable 'p' (define it in vars or pass -e p=...)"
    )


def test_templated_class_has_key_in_a_step(tree: Path) -> None:
    (tree / "playbooks" / "kimi.yaml").write_text(
        "name: k\nhosts: gpus\nvars: {cls: Kimi}\nsteps:\n"
        "  - verify_python: {path: /a.py, class_has: {'{{ cls }}': [f]}}\n"
    )
    step = plans(tree)[0].steps[0][1]
    assert step.model_dump()["verify_python"]["class_has"] == {"Kimi": ["f"]}
