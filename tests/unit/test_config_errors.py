"""Validation errors of playbooks and inventories: one line, file:line:col field: plain words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.config.errors import InputProblems
from deploy.config.load import load_inventory, load_playbook
from deploy.errors import InputError

HEAD = "name: demo\nhosts: all\nsteps:\n"


def _load_error(load: Callable[[Path], object], path: Path, text: str) -> InputError:
    """The one-line error ``load`` raises for a file holding ``text``."""
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load(path)
    assert "\n" not in str(info.value)
    return info.value


def playbook_error(tmp_path: Path, text: str) -> InputError:
    return _load_error(load_playbook, tmp_path / "pb.yaml", text)


def inventory_error(tmp_path: Path, text: str) -> InputError:
    return _load_error(load_inventory, tmp_path / "hosts.yaml", text)


def message(error: InputError, tmp_path: Path) -> str:
    return str(error).replace(str(tmp_path) + "/", "")


def test_unknown_key_lists_allowed_keys(tmp_path: Path) -> None:
    err = playbook_error(
        tmp_path,
        HEAD + "  - python_insert:\n      path: /a.py\n      class: C\n      code: x\n"
        "      bogus: 1\n",
    )
    assert message(err, tmp_path) == (
        "pb.yaml:8:7 steps[0].python_insert.bogus: unknown key 'bogus'"
        " (allowed: path, class, code, where, if_exists, replace, unsafe_dir, hardlinks)"
    )
    assert err.position is not None
    assert err.position.field == "steps[0].python_insert.bogus"
    assert (err.position.line, err.position.column) == (8, 7)


def test_unknown_key_suggests_close_match(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - backup: {path: /a}\n    nmae: x\n")
    assert message(err, tmp_path) == (
        "pb.yaml:5:5 steps[0].nmae: unknown key 'nmae' (allowed: name, tags, backup)"
        " (did you mean 'name'?)"
    )


def test_unknown_step_suggests_the_closest_action(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - backup: {path: /a}\n  - pyhton_insert: {}\n")
    assert message(err, tmp_path) == (
        "pb.yaml:5:5 steps[1].pyhton_insert: unknown step 'pyhton_insert' (steps: backup,"
        " python_insert, patch, append, lineinfile, copy, template, verify_python, verify_tail, verify_command, restart,"
        " stop, start, wait_healthy, smoke, gate_throughput) (did you mean 'python_insert'?)"
    )


def test_unknown_step_without_close_match(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - frob: {}\n")
    expected = "pb.yaml:4:5 steps[0].frob: unknown step 'frob' (steps:"
    assert message(err, tmp_path).startswith(expected)
    assert "did you mean" not in str(err)


def test_two_actions_in_one_step(tmp_path: Path) -> None:
    text = HEAD + "  - backup: {path: /a}\n    append: {path: /a, text: x}\n"
    err = playbook_error(tmp_path, text)
    assert message(err, tmp_path) == (
        "pb.yaml:4:5 steps[0]: a step has exactly one action, found 'backup' and 'append'"
        " (split it into steps)"
    )


def test_step_without_action_and_step_not_a_mapping(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - name: nothing to do\n")
    assert message(err, tmp_path).startswith("pb.yaml:4:5 steps[0]: a step needs an action key")
    err = playbook_error(tmp_path, HEAD + "  - backup\n")
    assert message(err, tmp_path) == (
        "pb.yaml:4:5 steps[0]: expected a step (a mapping with one action key), got a string"
    )


def test_missing_key_points_at_the_mapping(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - python_insert:\n      class: C\n      code: x\n")
    assert message(err, tmp_path) == (
        "pb.yaml:5:7 steps[0].python_insert.path: missing required key 'path'"
    )


def test_missing_top_level_key(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, "hosts: all\nsteps:\n  - backup: {path: /a}\n")
    assert message(err, tmp_path) == "pb.yaml:1:1 name: missing required key 'name'"


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (
            "  - verify_tail: {path: /a, lines: abc}\n",
            "pb.yaml:4:36 steps[0].verify_tail.lines: expected a list, got a string",
        ),
        (
            "  - backup: /a\n",
            "pb.yaml:4:13 steps[0].backup: expected a mapping, got a string",
        ),
        (
            "  - backup: {path: /a}\n    tags: files\n",
            "pb.yaml:5:11 steps[0].tags: expected a list, got a string",
        ),
        (
            "  - verify_command: {run: x, timeout: soon}\n",
            "pb.yaml:4:39 steps[0].verify_command.timeout: expected a number, got 'soon'",
        ),
        (
            "  - verify_command: {run: x, timeout: -1}\n",
            "pb.yaml:4:39 steps[0].verify_command.timeout: must be greater than 0, got -1",
        ),
        (
            "  - verify_tail: {path: /a}\n",
            "pb.yaml:4:18 steps[0].verify_tail: give exactly one of 'lines' or 'last_line'",
        ),
        (
            "  - python_insert: {path: /a, class: C, code: x, where: middle}\n",
            "pb.yaml:4:57 steps[0].python_insert.where: expected 'end' or a mapping, got 'middle'",
        ),
        (
            "  - python_insert: {path: /a, class: C, code: x, where: {after: a, before: b}}\n",
            "pb.yaml:4:57 steps[0].python_insert.where: give exactly one of 'after' or 'before'",
        ),
        (
            "  - python_insert: {path: /a, class: C, code: x, where: {aftr: a}}\n",
            "pb.yaml:4:58 steps[0].python_insert.where.aftr: unknown key 'aftr'"
            " (allowed: after, before) (did you mean 'after'?)",
        ),
    ],
)
def test_wrong_types_and_values(tmp_path: Path, step: str, expected: str) -> None:
    assert message(playbook_error(tmp_path, HEAD + step), tmp_path) == expected


def test_first_problem_in_file_order_with_count(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, "name: demo\nhosts: [all]\nsteps: []\nextra: 1\n")
    assert message(err, tmp_path) == "pb.yaml:2:8 hosts: expected a string, got a list (+2 more)"
    assert isinstance(err, InputProblems)
    assert [message(p, tmp_path) for p in err.problems] == [
        "pb.yaml:2:8 hosts: expected a string, got a list",
        "pb.yaml:3:8 steps: needs at least 1 item, got 0",
        "pb.yaml:4:1 extra: unknown key 'extra' (allowed: name, description, hosts, vars, secret_vars, services, steps, serial, max_fail, become)",
    ]


def test_templated_tags_are_refused(tmp_path: Path) -> None:
    err = playbook_error(tmp_path, HEAD + "  - backup: {path: /a}\n    tags: ['{{ t }}']\n")
    assert message(err, tmp_path) == (
        "pb.yaml:5:12 steps[0].tags[0]: tags are not templated"
        " (they select steps before variables are known)"
    )


def test_templated_non_string_fields_load_as_written(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(HEAD + "  - verify_command: {run: x, timeout: '{{ t }}'}\n")
    loaded = load_playbook(path)
    assert loaded.data["steps"][0]["verify_command"]["timeout"] == "{{ t }}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "hosts:\n  a:\n    identity_fle: k\n",
            "hosts.yaml:3:5 hosts.a.identity_fle: unknown key 'identity_fle' (allowed: address,"
            " port, user, identity_file, known_hosts, ssh_config, accept_new_host_keys,"
            " password_env, become, become_user, become_password_env, connect_timeout,"
            " lock_timeout, compression, connect_ahead, state_dir, vars) (did you mean 'identity_file'?)",
        ),
        (
            "hosts:\n  a: {port: 99999}\n",
            "hosts.yaml:2:13 hosts.a.port: must be less than or equal to 65535, got 99999",
        ),
        (
            "hosts:\n  a: {port: ssh}\n",
            "hosts.yaml:2:13 hosts.a.port: expected an integer, got 'ssh'",
        ),
        (
            "hosts:\n  123: {}\n",
            "hosts.yaml:2:3 hosts[123]: key 123 must be a string (quote it: '123')",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  g: 5\n",
            "hosts.yaml:4:6 groups.g: expected a list or a mapping, got an integer",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  g: {hosts: [a], bogus: 1}\n",
            "hosts.yaml:4:19 groups.g.bogus: unknown key 'bogus'"
            " (allowed: hosts, vars, become, become_user)",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  g:\n    - a\n    - b\n",
            "hosts.yaml:6:7 groups.g[1]: group 'g' lists unknown host 'b'",
        ),
        (
            "hosts:\n  gpu-1: {}\ngroups:\n  g:\n    hosts: [gpu-2]\n",
            "hosts.yaml:5:13 groups.g.hosts[0]: group 'g' lists unknown host 'gpu-2'"
            " (did you mean 'gpu-1'?)",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  g: [a]\n  h: [g]\n",
            "hosts.yaml:5:7 groups.h[0]: group 'h' lists 'g', which is a group (groups hold hosts)",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  a: [a]\n",
            "hosts.yaml:4:6 groups.a: 'a' is both a host and a group: rename one"
            " (patterns would be ambiguous)",
        ),
        (
            "hosts:\n  a: {}\ngroups:\n  all: [a]\n",
            "hosts.yaml:4:8 groups.all: group name 'all' is reserved (it means every host)",
        ),
        (
            "hosts:\n  a: {}\nvars:\n  my-var: 1\n",
            "hosts.yaml:4:3 vars.my-var: variable name 'my-var' is not usable in templates"
            " (letters, digits, _)",
        ),
        (
            "hosts:\n  a:\n    vars: {inventory_hostname: x}\n",
            "hosts.yaml:3:12 hosts.a.vars.inventory_hostname: variable 'inventory_hostname'"
            " is built in and cannot be set",
        ),
        ("vars: []\n", "hosts.yaml:1:7 vars: expected a mapping, got a list"),
        # a template renders to a string, never a mapping: refused even as written
        ("hosts: '{{ x }}'\n", "hosts.yaml:1:8 hosts: expected a mapping, got a string"),
        (
            "vars:\n  yes: 1\n",
            "hosts.yaml:2:3 vars.True: this key reads as a boolean in YAML: quote it",
        ),
        ("vars:\n  ~: 1\n", "hosts.yaml:2:3 vars.None: this key reads as null in YAML: quote it"),
    ],
)
def test_inventory_errors(tmp_path: Path, text: str, expected: str) -> None:
    assert message(inventory_error(tmp_path, text), tmp_path) == expected


def test_missing_inventory_says_how_to_give_one(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_inventory(tmp_path / "nope.yaml")
    assert str(info.value) == (
        f"inventory not found: {tmp_path}/nope.yaml (use -i FILE or set DEPLOY_INVENTORY)"
    )


def test_a_host_name_with_a_line_break_keeps_a_problem_on_one_line() -> None:
    """YAML allows any string as a host's name; the "(host NAME)" a problem ends with must
    not break the one-line rule (found by tests/faults/test_generated_config.py)."""
    from deploy.config.errors import Problems

    error = InputError("undefined variable 'x'")
    with pytest.raises(InputError) as raised:
        Problems(collect=False).report(error, "line\nbreak")
    assert str(raised.value) == "undefined variable 'x' (host line\\nbreak)"
    collected = Problems(collect=True)
    collected.report(error, "a\rb")
    collected.report(error, "c")
    assert collected.lines() == ["undefined variable 'x' (hosts a\\rb, c)"]
