"""lineinfile, copy and template over real sshd (issue 34, point 1), through the real CLI.

A playbook using the three steps applies, re-runs with no change (``--check
--detailed-exitcode`` exits 0) and rolls back: the edited file back byte for byte with its
mode, the created files and directories gone. ``validate`` gates the write; a missing
directory is an error unless ``create_dirs``; ``diff: false`` content reaches none of the plan,
the terminal, ``--json``, history, the log file or the webhook.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import Deploy, KimiHost
from tests.integration.test_scheduled import webhook

pytestmark = pytest.mark.ssh
__all__ = ["webhook"]  # the fixture, imported to be used here

ENV = b"# operator's file\r\nSGLANG_PORT=30000\r\nSGLANG_DEBUG=1\r\n"
SECRET = "s3cr3t-MARKER-7f1c-never-shown"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def setup(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> tuple[KimiHost, Deploy, Path, Path]:
    """One sshd host with an operator's env file (CRLF, 0640) in ``etc``; the playbook dir."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    etc = kimi.host.root / "etc"
    etc.mkdir(mode=0o755)
    env = etc / "server.env"
    env.write_bytes(ENV)
    os.chmod(env, 0o640)
    books = tmp_path / "books"
    (books / "templates").mkdir(parents=True)
    (books / "files").mkdir()
    return kimi, deploy, etc, books


def test_three_steps_apply_rerun_and_roll_back_over_ssh(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    kimi, deploy, etc, books = setup(make_kimi_hosts, tmp_path)
    (books / "templates" / "app.conf.j2").write_text(
        "# {{ inventory_hostname }}\nport={{ app_port }}\n{% for g in gpus %}gpu={{ g }}\n"
        "{% endfor %}"
    )
    (books / "files" / "motd").write_bytes(b"binary-ish \xff\xfe bytes\n")
    playbook = write(
        books / "three.yaml",
        {
            "name": "three",
            "hosts": "all",
            "vars": {"etc": str(etc), "app_port": 8080, "gpus": [0, 1]},
            "steps": [
                {"lineinfile": {"path": "{{ etc }}/server.env", "regexp": "^SGLANG_PORT=",
                                "line": "SGLANG_PORT={{ app_port }}"}},
                {"lineinfile": {"path": "{{ etc }}/server.env", "regexp": "^SGLANG_DEBUG=",
                                "state": "absent"}},
                {"copy": {"src": "files/motd", "dest": "{{ etc }}/motd", "mode": "0600"}},
                {"template": {"src": "templates/app.conf.j2", "dest": "{{ etc }}/app/d/app.conf",
                              "create_dirs": True, "validate": "grep -q '^port=' %s"}},
            ],
        },
    )  # fmt: skip
    env, motd, conf = etc / "server.env", etc / "motd", etc / "app" / "d" / "app.conf"

    check = deploy("apply", str(playbook), "--check", "--detailed-exitcode")
    assert check.exit_code == 5, check.output
    assert "+SGLANG_PORT=8080" in check.stdout and "-SGLANG_DEBUG=1" in check.stdout
    assert env.read_bytes() == ENV and not motd.exists() and kimi.runs() == []

    applied = deploy("apply", str(playbook), "--yes", "--json")
    assert applied.exit_code == 0, applied.output
    report = json.loads(applied.stdout)
    assert [s["status"] for s in report["hosts"][0]["steps"]] == ["changed"] * 4
    assert env.read_bytes() == b"# operator's file\r\nSGLANG_PORT=8080\r\n"
    assert mode_of(env) == 0o640
    assert motd.read_bytes() == b"binary-ish \xff\xfe bytes\n" and mode_of(motd) == 0o600
    assert conf.read_text() == "# gpu-1\nport=8080\ngpu=0\ngpu=1\n" and mode_of(conf) == 0o644
    assert mode_of(etc / "app") == 0o755

    again = deploy("apply", str(playbook), "--check", "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    rerun = deploy("apply", str(playbook), "--yes", "--json")
    assert rerun.exit_code == 0 and json.loads(rerun.stdout)["hosts"][0]["outcome"] == "unchanged"
    (run_id,) = kimi.runs()

    undone = deploy("rollback", "--yes")
    assert undone.exit_code == 0, undone.output
    assert env.read_bytes() == ENV and mode_of(env) == 0o640
    assert not motd.exists() and not conf.exists() and not (etc / "app").exists()
    assert sorted(p.name for p in etc.iterdir()) == ["server.env"]
    assert run_id in kimi.runs()


def test_validate_failure_and_missing_directory_change_nothing(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    _, deploy, etc, books = setup(make_kimi_hosts, tmp_path)
    # A validator that reads the new bytes at the path it is given, and refuses them.
    invalid = write(
        books / "invalid.yaml",
        {
            "name": "invalid",
            "hosts": "all",
            "steps": [
                {"copy": {"content": "SGLANG_PORT=x\n", "dest": f"{etc}/server.env",
                          "validate": "grep -q '^SGLANG_PORT=[0-9]*$' %s"}},
            ],
        },
    )  # fmt: skip
    failed = deploy("apply", str(invalid), "--yes")
    assert failed.exit_code == 1, failed.output
    assert "validate `grep -q '^SGLANG_PORT=[0-9]*$' %s` exited 1" in failed.output
    assert env_unchanged(etc)

    nodir = write(
        books / "nodir.yaml",
        {"name": "nodir", "hosts": "all",
         "steps": [{"copy": {"content": "x\n", "dest": f"{etc}/new/x.conf"}}]},
    )  # fmt: skip
    refused = deploy("apply", str(nodir), "--yes")
    assert refused.exit_code == 1 and "set create_dirs: true" in refused.output
    assert not (etc / "new").exists()


def env_unchanged(etc: Path) -> bool:
    env = etc / "server.env"
    return env.read_bytes() == ENV and mode_of(env) == 0o640


def test_bad_input_is_one_line_and_touches_no_host(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]], tmp_path: Path
) -> None:
    kimi, deploy, etc, books = setup(make_kimi_hosts, tmp_path)
    cases = {
        "missing": ({"src": "files/nothing.txt"}, "src not found"),
        "both": ({"src": "x", "content": "y"}, "give exactly one of 'src' or 'content'"),
        "mode": ({"content": "y", "mode": "rwx"}, "is not an octal mode"),
    }
    for name, (args, message) in cases.items():
        playbook = write(
            books / f"{name}.yaml",
            {"name": name, "hosts": "all",
             "steps": [{"copy": {"dest": f"{etc}/x", **args}}]},
        )  # fmt: skip
        result = deploy("apply", str(playbook), "--yes")
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"deploy: {playbook}:") and message in line, line
    assert kimi.runs() == [] and env_unchanged(etc)


def test_diff_false_content_reaches_no_output(
    make_kimi_hosts: Callable[..., tuple[list[KimiHost], Deploy]],
    tmp_path: Path,
    webhook: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = webhook
    kimi, deploy, etc, books = setup(make_kimi_hosts, tmp_path)
    (books / "templates" / "key.j2").write_text("api_key={{ api }}\n")
    (books / "files" / "token").write_text(f"{SECRET}-file\n")
    playbook = write(
        books / "secret.yaml",
        {
            "name": "secret",
            "hosts": "all",
            # A name that masking would not catch: diff: false is what hides it.
            "vars": {"api": f"{SECRET}-template"},
            "steps": [
                {"copy": {"content": f"{SECRET}-inline\n", "dest": f"{etc}/a", "mode": "0600",
                          "diff": False}},
                {"copy": {"src": "files/token", "dest": f"{etc}/b", "diff": False}},
                {"template": {"src": "templates/key.j2", "dest": f"{etc}/c", "diff": False,
                              # fails, and a validator that prints the content says nothing
                              "validate": "cat %s; exit 1"}},
            ],
        },
    )  # fmt: skip
    log = tmp_path / "deploy.log"
    outputs = []
    check = deploy("apply", str(playbook), "--check", "--diff", "--detailed-exitcode",
                   "--json", "--notify-url", url, "--log-file", str(log))  # fmt: skip
    assert check.exit_code == 5, check.output
    outputs.append(check.output)
    human = deploy("apply", str(playbook), "--check", "--diff", "-v")
    outputs.append(human.output)
    failed = deploy("apply", str(playbook), "--yes", "--diff", "-v", "--log-file", str(log),
                    "--notify-url", url)  # fmt: skip
    assert failed.exit_code == 1, failed.output
    outputs.append(failed.output)
    (run_id,) = kimi.runs()
    history = deploy("history", "--json")
    assert run_id in history.stdout
    shown = deploy("show", run_id, "--json")
    outputs += [history.output, shown.output, deploy("show", run_id).output, log.read_text()]
    assert len(received) == 2, "the drift and the failure were both sent"
    outputs += [json.dumps(hook["body"]) for hook in received]
    state = Path(os.environ["XDG_STATE_HOME"]) / "deploy"
    outputs += [p.read_text(errors="replace") for p in state.rglob("*") if p.is_file()]
    assert len(outputs) > 7
    for text in outputs:  # first: a leak fails here, whatever else changed
        assert SECRET not in text
    assert "not shown (diff: false)" in check.stdout
    assert "exited 1: output not shown (diff: false)" in failed.output
    assert shown.exit_code == 0 and "not shown (diff: false)" in shown.stdout, shown.output
    assert not (etc / "a").exists() and not (etc / "b").exists(), "the failed run was undone"
    assert env_unchanged(etc)
