"""Handshakes ahead of the login (`deploy.remote.handshake`), against real sshd hosts.

A command starts each selected host's TCP connect, key exchange and host-key check in the
background as soon as its inventory is loaded, and validates the rest of its input
meanwhile. What must hold: bad input still exits 2 with its one line and logs in nowhere
(sshd's own log is the witness: a connection closed before authentication, no "Accepted"),
writes nothing (known_hosts included); with valid input the key exchange really ran while
the playbook was being validated (trace spans, not wall times), over the one connection the
run then logs in on; and what a handshake finds (an unknown, changed key, a closed port) is
reported only with valid input, in the same words and with the same exit code as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.config.inventory import HostSpec
from deploy.engine.handshakes import connect_settings
from deploy.errors import InputError
from deploy.remote.early import negotiate
from deploy.remote.handshake import Handshakes, direct
from deploy.remote.settings import ConnectSettings
from deploy.sandbox.ports import free_port
from deploy.sandbox.sshd import SshHost
from tests.integration.conftest import REPO, Deploy, KimiHost, sha256
from tests.integration.handshakes import MakeHosts, bad_run, edit_inventory

FILES_ONLY = ("--skip-tags", "service")

#: BAD_PLAYBOOK's mistake behind 300 valid steps: their validation gives the handshake thread time
#: to reach sshd even on a loaded machine (with the mistake first, the run could exit before
#: its connect was made, and the test would prove nothing).
SLOW_BAD_PLAYBOOK = (
    "name: bad\nhosts: gpu\nsteps:\n"
    + "  - verify_tail: {path: /etc/hostname, last_line: x}\n" * 300
    + "  - backup: {paths: [/etc/hostname]}\n"
)
SLOW_BAD_LINE = "bad.yaml:304:13 steps[300].backup.path: missing required key 'path'"

#: Runs ``deploy`` in a child process (as the console script would) and prints, on exit,
#: every `deploy.trace` span as JSON: [thread, name, start, end].
TRACED = """
import atexit, json, sys, threading
from deploy import trace
spans = []
trace.subscribe(lambda n, d, s, e: spans.append([threading.current_thread().name, n, s, e]))
atexit.register(lambda: print("SPANS " + json.dumps(spans), file=sys.stderr))
from deploy.cli import main
main(sys.argv[1:], prog_name="deploy")  # embedded: ends by SystemExit, so atexit prints spans
"""


def _log_since(host: SshHost, offset: int) -> str:
    return host.log_text()[offset:]


def _quiet_offset(host: SshHost, quiet: float = 0.3, limit: float = 5.0) -> int:
    """The log's length once sshd has stopped writing to it for ``quiet`` s: sshd logs a
    connection's end asynchronously, so an earlier test's lines can land after a bare
    ``len()`` (seen on a loaded machine) and be taken for this test's contact."""
    deadline = time.monotonic() + limit
    size = len(host.log_text())
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = len(host.log_text())
        if now == size:
            break
        size = now
    return size


def _await_log(host: SshHost, offset: int, needle: str, timeout: float = 10.0) -> str:
    """sshd's log since ``offset`` once it contains ``needle`` (sshd writes it asynchronously)."""
    deadline = time.monotonic() + timeout
    text = _log_since(host, offset)
    while needle not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = _log_since(host, offset)
    return text


def _closed_port() -> int:
    """A port nothing listens on: reserved for this process, so no sandbox server takes it."""
    return free_port()


def test_bad_playbook_exits_2_after_a_key_exchange_and_no_login(
    make_kimi_hosts: MakeHosts,
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    before, offset = sha256(kimi.model_file), len(kimi.host.log_text())
    result = bad_run(deploy, playbook=SLOW_BAD_PLAYBOOK, line=SLOW_BAD_LINE)
    assert "Traceback" not in result.output
    log = _await_log(kimi.host, offset, "[preauth]")
    # The handshake reached sshd (so this test is about something), and stopped there: closed
    # (or reset, when the exit caught it mid-exchange) before authentication.
    assert "by 127.0.0.1" in log and "[preauth]" in log, log
    assert "Accepted" not in log and "session" not in log.lower(), log
    assert sha256(kimi.model_file) == before
    assert not kimi.host.state_dir.exists()


def _traced_change_run(deploy: Deploy, kimi: KimiHost, code: str) -> list[list[Any]]:
    """Run the files-only change run under ``code`` (`TRACED`, or a variant of it); assert it
    succeeded and patched the file; return the spans it printed."""
    proc = subprocess.run(
        [sys.executable, "-c", code, "apply", "kimi-eagle3", "--yes", *FILES_ONLY],
        cwd=deploy.workdir,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "DEPLOY_INVENTORY": str(deploy.inventory), "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert b"def set_eagle3_layers_to_capture" in kimi.model_file.read_bytes()
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("SPANS ")]
    spans: list[list[Any]] = json.loads(line.removeprefix("SPANS "))
    return spans


def test_a_change_run_negotiates_while_the_playbook_is_validated(
    make_kimi_hosts: MakeHosts,
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    offset = len(kimi.host.log_text())
    spans = _traced_change_run(deploy, kimi, TRACED)

    def one(name: str) -> tuple[str, float, float]:
        (found,) = [(thread, start, end) for thread, n, start, end in spans if n == name]
        return found

    kex_thread, kex_start, _ = one("ssh.key_exchange")
    _, _, validated = one("config.load_playbook")
    _, _, resolved = one("config.resolve")
    login_thread, login_start, _ = one("ssh.connect")
    assert kex_thread == "handshake-gpu-1"
    # The key exchange began before the playbook was validated, in the background...
    assert kex_start < validated
    # ...and the login (in the host's thread) only after the whole input was.
    assert login_thread != "MainThread" and login_start > resolved
    # One TCP connection, one login: the run went on over the negotiated transport.
    log = _log_since(kimi.host, offset)
    assert log.count("Accepted publickey") == 1, log
    assert "[preauth]" not in log, log


def test_an_untested_paramiko_runs_without_a_handshake_ahead(make_kimi_hosts: MakeHosts) -> None:
    """The adapters override paramiko's private methods: under a release they were not tested
    with (here one that calls itself 6.0.0) the run connects at the login, as if no handshake
    had been made ahead, and succeeds; it must never wait on an accept nobody dispatches."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    offset = _quiet_offset(kimi.host)
    newer = "import paramiko\nparamiko.__version__ = '6.0.0'\n" + TRACED
    spans = _traced_change_run(deploy, kimi, newer)
    names = [name for _thread, name, _start, _end in spans]
    assert "ssh.handshake" in names  # the thread ran, and declined:
    assert "ssh.key_exchange" not in names and "ssh.service_request" not in names
    log = _await_log(kimi.host, offset, "Accepted publickey")
    assert log.count("Accepted publickey") == 1, log


def test_an_unknown_host_key_is_reported_only_with_valid_input(
    make_kimi_hosts: MakeHosts, tmp_path: Path
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    edit_inventory(deploy, known_hosts=str(empty))
    before = sha256(kimi.model_file)

    bad_run(deploy, "--accept-new-host-keys")
    assert empty.read_text() == "", "accept-new records a key only at the login"

    unknown = deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY)
    assert unknown.exit_code == 4, unknown.output
    assert f"host key for [127.0.0.1]:{kimi.host.port} is not in {empty}" in unknown.output
    assert "pass --accept-new-host-keys" in unknown.output
    assert sha256(kimi.model_file) == before and empty.read_text() == ""

    accepted = deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY, "--accept-new-host-keys")
    assert accepted.exit_code == 0, accepted.output
    assert empty.read_text().split()[1:] == kimi.host.host_key_line().split()[1:]


def test_a_changed_host_key_is_reported_only_with_valid_input(
    make_kimi_hosts: MakeHosts,
) -> None:
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    kimi.host.restart(new_host_key=True)
    known = kimi.host.known_hosts.read_text()

    bad_run(deploy, "--accept-new-host-keys")

    changed = deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY, "--accept-new-host-keys")
    assert changed.exit_code == 4, changed.output
    assert "CHANGED" in changed.output and "ssh-keygen -R" in changed.output
    assert kimi.host.known_hosts.read_text() == known


def test_a_closed_port_is_input_error_first_then_not_attempted(
    make_kimi_hosts: MakeHosts,
) -> None:
    _, deploy = make_kimi_hosts(["0.5.9"])
    port = _closed_port()
    edit_inventory(deploy, port=port)

    bad_run(deploy)

    refused = deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY)
    assert refused.exit_code == 4, refused.output
    assert f"cannot connect to 127.0.0.1:{port}: connection refused" in refused.output


def test_check_rollback_and_status_log_in_over_their_handshakes(
    make_kimi_hosts: MakeHosts,
) -> None:
    """One mechanism for every command that connects: each logs in once per host, on the
    connection its handshake made; one that contacts no host makes none."""
    (kimi,), deploy = make_kimi_hosts(["0.5.9"])
    before = sha256(kimi.model_file)
    offset = _quiet_offset(kimi.host)
    listed = deploy("apply", "kimi-eagle3", "--list-hosts", "--list-tasks")
    assert listed.exit_code == 0 and "gpu-1" in listed.stdout, listed.output
    time.sleep(0.2)
    assert _log_since(kimi.host, offset) == ""
    assert deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY).exit_code == 0
    for command in (
        ("apply", "kimi-eagle3", "--check", *FILES_ONLY),
        ("status",),
        ("rollback", "--yes"),
    ):
        offset = len(kimi.host.log_text())
        result = deploy(*command)
        assert result.exit_code == 0, result.output
        log = _log_since(kimi.host, offset)
        assert log.count("Accepted publickey") == 1 and "[preauth]" not in log, log
    assert sha256(kimi.model_file) == before


def test_closing_handshakes_leaves_no_thread_and_no_connection(ssh_host: SshHost) -> None:
    entry = {k: v for k, v in ssh_host.inventory_entry().items() if k != "vars"}
    settings = connect_settings(ssh_host.name, HostSpec.model_validate(entry))
    offset = len(ssh_host.log_text())
    handshakes = Handshakes()
    handshakes.start([settings])
    (pending,) = handshakes._pending.values()  # white-box: wait for the handshake to finish
    assert pending.thread is not None
    pending.thread.join(10)
    early = pending.result
    assert early is not None and early.error is None and early.transport is not None
    handshakes.close()
    assert early.transport is None
    assert [t.name for t in threading.enumerate() if t.name.startswith("handshake-")] == []
    assert not [t for t in threading.enumerate() if "Transport" in type(t).__name__]
    assert handshakes.take(settings) is None
    log = _await_log(ssh_host, offset, "[preauth]")
    assert "[preauth]" in log and "Accepted" not in log, log


def test_a_host_behind_a_proxyjump_is_not_negotiated_ahead(
    ssh_host: SshHost, tmp_path: Path
) -> None:
    """Reaching it ahead would mean logging in to the jump host: it connects at login, as
    before (tests/integration/test_apply_core.py runs such a host end to end). The hop is
    named ``localhost``: Fabric drops a hop whose name is the target's own address."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host behind-jump\n  HostName 127.0.0.1\n  Port {ssh_host.port}\n"
        f"  ProxyJump {ssh_host.user}@localhost:{ssh_host.port}\n"
    )
    settings = ConnectSettings(
        name="gpu-1",
        address="behind-jump",
        known_hosts=str(ssh_host.known_hosts),
        ssh_config=str(config),
    )
    offset = _quiet_offset(ssh_host)
    assert not direct(settings)
    assert negotiate(settings, threading.Event()) is None
    time.sleep(0.2)
    assert _log_since(ssh_host, offset) == ""


def test_a_batch_called_off_is_never_contacted(make_kimi_hosts: MakeHosts) -> None:
    """Only the hosts a run starts with are negotiated ahead: a later batch that ``max_fail``
    calls off stays "never contacted", as the batches' promise says — not even a handshake."""
    (broken, later), deploy = make_kimi_hosts([None, "0.5.9"])
    offset = _quiet_offset(later.host)
    result = deploy("apply", "kimi-eagle3", "--yes", *FILES_ONLY, "--serial", "1", "--json")
    outcomes = {h["host"]: h["outcome"] for h in json.loads(result.stdout)["hosts"]}
    assert outcomes == {"gpu-1": "failed", "gpu-2": "skipped"}, result.output
    assert broken.host.log_text().count("Accepted publickey") >= 1
    time.sleep(0.2)
    assert _log_since(later.host, offset) == ""


def test_a_login_that_fails_before_it_starts_closes_the_handshake(
    ssh_host: SshHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``password_env`` naming an unset variable is found at the login, after the handshake
    was taken: the one line as before, and the negotiated connection is closed then."""
    monkeypatch.delenv("DEPLOY_TEST_UNSET", raising=False)
    entry = {k: v for k, v in ssh_host.inventory_entry().items() if k != "vars"}
    entry["password_env"] = "DEPLOY_TEST_UNSET"
    settings = connect_settings(ssh_host.name, HostSpec.model_validate(entry))
    handshakes = Handshakes()
    handshakes.start([settings])
    with pytest.raises(InputError, match=r"password_env names \$DEPLOY_TEST_UNSET"):
        handshakes.connect(settings)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _transports():
        time.sleep(0.05)
    assert _transports() == []
    handshakes.close()


def _transports() -> list[str]:
    return [t.name for t in threading.enumerate() if "Transport" in type(t).__name__]
