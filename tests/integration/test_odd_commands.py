"""Honest exits for odd commands (issue 30, point 5), over real sshd.

Each of these used to end in a misleading code or a traceback: a rollback of a run that does
not exist said "desired state" (exit 0); a run id that is a path was a traceback; an address
that a ProxyCommand's shell would read as two commands reached the hosts and ended "rollback
failed". Each is now one line and exit 2, before any host is touched. Run ids are taken by a
unique prefix or suffix, and a ``--check`` run names no id that `deploy show` cannot find.
"""

from __future__ import annotations

import json
import re
import resource
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.integration.conftest import Deploy, KimiHost

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]
FILES_ONLY = ("--skip-tags", "service")


def _one_line_error(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("deploy: ")]
    assert len(errors) == 1, output
    assert "Traceback" not in output, output
    return errors[0]


def test_rollback_of_a_run_that_does_not_exist_is_exit_2(make_kimi_hosts: MakeHosts) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    # A part of an id nothing recorded has: refused from the workstation's records alone.
    partial = deploy("rollback", "nonexistent-run", "--yes")
    assert partial.exit_code == 2, partial.output
    assert "no recorded run nonexistent-run" in _one_line_error(partial.output)
    assert not kimi.host.state_dir.exists(), "no host was contacted"
    # A whole id that neither this workstation nor any host knows: the hosts say so, exit 2
    # as `deploy show` is, never "desired state".
    whole = "20250101T000000.000000Z-abcdef"
    full = deploy("rollback", whole, "--yes")
    assert full.exit_code == 2, full.output
    assert f"no run {whole} on gpu-1 nor in `deploy history`" in _one_line_error(full.output)
    assert deploy("show", whole).exit_code == 2
    assert json.loads(deploy("history", "--json").stdout) == [], "a typo is not recorded"


def test_a_run_id_that_is_a_path_is_exit_2(make_kimi_hosts: MakeHosts, tmp_path: Path) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    elsewhere = tmp_path / "report.json"
    elsewhere.write_text("{}")
    for run_id in (str(elsewhere.with_suffix("")), "../../etc/passwd", "..", "-rf", "a b"):
        for command in (["rollback", "--yes", "--", run_id], ["show", "--", run_id]):
            result = deploy(*command)
            assert result.exit_code == 2, (command, result.output)
            assert "is not a run id" in _one_line_error(result.output), result.output
    assert not kimi.host.state_dir.exists()


def test_run_ids_by_unique_suffix_and_check_names_none(make_kimi_hosts: MakeHosts) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    original = kimi.model_file.read_bytes()
    check = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--check")
    assert check.exit_code == 0, check.output
    # A --check run is not recorded: its last line names no run id `show` could not find.
    last = check.stdout.strip().splitlines()[-1]
    assert last.startswith("exit 0 (") and not re.search(r"\d{8}T\d{6}", last), last
    applied = deploy("apply", "kimi-eagle3", *FILES_ONLY, "--yes", "--json")
    assert applied.exit_code == 0, applied.output
    run_id = json.loads(applied.stdout)["run_id"]
    suffix = run_id.rsplit("-", 1)[1]
    shown = deploy("show", suffix)
    assert shown.exit_code == 0 and f"run {run_id}: exit 0" in shown.stdout, shown.output
    back = deploy("rollback", suffix, "--yes")
    assert back.exit_code == 0, back.output
    assert kimi.model_file.read_bytes() == original


def test_an_address_a_proxycommand_shell_would_split_is_exit_2(
    make_kimi_hosts: MakeHosts, tmp_path: Path
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    ran = tmp_path / "proxycommand-ran"
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host *\n    ProxyCommand sh -c 'touch {ran}; nc %h %p'\n")
    inventory = yaml.safe_load(deploy.inventory.read_text())
    entry = inventory["hosts"]["gpu-1"]
    entry.update(
        address=f"{entry.get('address', '127.0.0.1')};touch {ran}", ssh_config=str(ssh_config)
    )
    deploy.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))
    for command in (
        ["rollback", "--yes"],
        ["rollback", "20250101T000000.000000Z-abcdef", "--yes"],
        ["apply", "kimi-eagle3", *FILES_ONLY, "--yes"],
        ["apply", "kimi-eagle3", *FILES_ONLY, "--check"],
        ["status"],
    ):
        result = deploy(*command)
        assert result.exit_code == 2, (command, result.output)
        line = _one_line_error(result.output)
        assert (
            "hosts.yaml:" in line and "is not a host name, IP address or ssh_config alias" in line
        )
    assert not ran.exists(), "the ProxyCommand never ran"
    assert not kimi.host.state_dir.exists()


def test_an_alias_bomb_in_the_inventory_is_exit_2_for_rollback(make_kimi_hosts: MakeHosts) -> None:
    _, deploy = make_kimi_hosts(["0.5.9"])
    lines = ['  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  {name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    document = yaml.safe_load(deploy.inventory.read_text())
    document.pop("vars", None)  # the bomb is the inventory's variables (9**9 strings)
    text = yaml.safe_dump(document, sort_keys=False) + "vars:\n" + "\n".join(lines) + "\n"
    deploy.inventory.write_text(text)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, hard))  # inherited by the CLI
    try:
        for command in (["rollback", "--yes"], ["status"], ["apply", "kimi-eagle3", "--check"]):
            result = deploy(*command)
            assert result.exit_code == 2, (command, result.output)
            assert "expands to more than" in _one_line_error(result.output)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
