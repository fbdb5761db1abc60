"""Round trips are deploy's cost: a change that adds SSH operations per host must fail here.

The budget is the most SSH operations per host — as ``deploy apply --json`` counts them in
``hosts[].ops`` — that the kimi-eagle3 change run and its no-change re-run may make. It is set
to what deploy measured when it was written; lower it when deploy gets cheaper, never raise it
without a reason written next to it. ``bench`` reads these constants (with ``ast``, not by
importing this file) to write the same budget into docs/performance.md: one source of truth.

Each exec starts the user's login shell on the host (``.bashrc`` included, ~100 ms where it
runs ``pyenv init``); a ``cmd`` runs in the lock's already running shell and an SFTP request
in the SFTP server, neither starting one. The exec budget is the one that hurts.

Also here: ``deploy --help`` must not import paramiko, fabric or yaml — start-up time is part
of every command an operator types, and the SSH stack alone costs ~0.1 s to import.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.delay import DelayNetwork
from deploy.remote.lock import acquire
from deploy.sandbox.sshd import SshHost
from tests.integration.conftest import Deploy, KimiHost, open_remote

#: Per host, the kimi-eagle3 change run on SGLang 0.5.9 (exec: the lock's shell; cmd: the
#: compile check, run in that shell — `deploy.remote.session`).
#: sftp 37 -> 39: `write_atomic` now stats each owned temp file to prove every byte landed
#: (a full disk used to truncate the file silently).
#: exec 2 -> 1 (+ cmd 1): the compile check no longer starts a login shell of its own.
#: sftp 39 -> 36: the begin, backup and done journal lines are not fsynced on their own (the
#: next intent or end line's fsync makes them durable; see deploy/engine/journal.py).
#: sftp 36 -> 32, cmd 1 -> 2: the file's lstat and content come in one command in the lock's
#: shell (deploy/remote/shellfile.py), so a re-run opens no SFTP session at all — which on a
#: host whose sshd starts sftp-server through the login shell is a second shell saved.
#: cmd 2 -> 1: the files the leading file steps read come with the lock's own exec
#: (``acquire(prefetch=)``), so the fetch is no round trip of its own.
#: sftp 32 -> 0, + wait 3 (issue 17 item 3): writes, saved copies and journal records go to
#: the host's file helper in the lock's shell (deploy/hostpy/fileagent.py), sent without
#: waiting; the run waits for their answers with the compile check and at commit. ``wait``
#: counts the requests the client blocked on (the lock's answer included): what a real
#: network charges one round trip each.
#: cmd 1 -> 2 (wait unchanged): the compile check is also sent with the lock, so that a re-run
#: waits for nothing after it; the change run changed the file first, so it checks again.
#: Not counted in ``wait`` (the same for every tool, the floor included): the channel's open
#: and the exec's reply (deploy's lock answer now comes with that reply: what is sent ahead
#: travels in the exec's command line, not after the window sshd grants with the reply;
#: tests/integration/test_lock_ahead.py times it). The release's wait for the shell's exit status is gone (issue 17: one
#: round trip per host at the end of every run); `test_releasing_the_lock_waits_for_no_round_trip`
#: fails if it comes back. `python -m bench.wire` lists every wait on the wire.
#: wait 3 -> 2: the compile check of the new bytes is sent as a check behind the writes, and
#: the commit (manifest, end record) right behind it; the host writes the end record only if
#: the check passed (deploy/engine/verdicts.py), so the run waits once for all of it.
#: cmd 2 -> 0 (issue 17, host CPU): the compile check sent with the lock only looks its record
#: up, which the file helper answers as a request (`deploy.checks.compile.ahead_lookup`), and
#: the helper runs on the compile check's interpreter (here this one), so it runs the check of
#: the new bytes itself, as a request the commit depends on (`fileagent._compile`).
#: cmd 0 -> 2 (issue 33, wait unchanged): that helper path bought ~16 ms of the host's CPU a
#: change run (4.2 % of a loopback run) and no round trip, below the ablation's bar
#: (docs/performance.md, "Ablation"), so it was removed: both checks are commands of the lock's
#: already running shell again — the one sent ahead in the lock's exec, the other as a
#: ``CHECK`` behind the writes — neither a wait of its own.
CHANGE_RUN_BUDGET = {"exec": 1, "cmd": 2, "sftp": 0, "wait": 2}
#: Per host, the same playbook again on the patched file: nothing to change. cmd 1: the
#: compile check sent with the lock answers from the change run's record (state_dir/compiled),
#: a command of the lock's shell (the helper's lookup, cmd 0, was removed with it: issue 33).
#: wait 1: the lock's answer brings the files and the compile check sent with it.
RERUN_BUDGET = {"exec": 1, "cmd": 1, "sftp": 0, "wait": 1}
HOSTS = 2
#: The file change only: the sandbox hosts run no SGLang server for the service steps.
APPLY = ("apply", "kimi-eagle3", "--yes", "--json", "--skip-tags", "service")

CLASS = "KimiK25ForConditionalGeneration"
ENTRY = f"EntryClass = [{CLASS}]"

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]


def _ops(result_stdout: str) -> dict[str, dict[str, object]]:
    report = json.loads(result_stdout)
    return {h["host"]: {"outcome": h["outcome"], **h["ops"]} for h in report["hosts"]}


def _over(ops: dict[str, dict[str, object]], budget: dict[str, int]) -> list[str]:
    return [
        f"{host}: {kind} {counts.get(kind)} > {limit}"
        for host, counts in ops.items()
        for kind, limit in budget.items()
        if int(counts.get(kind, 0)) > limit  # type: ignore[call-overload]
    ]


def test_change_run_and_rerun_stay_within_the_round_trip_budget(
    make_kimi_hosts: MakeHosts,
) -> None:
    hosts, deploy = make_kimi_hosts(["0.5.9"] * HOSTS)

    first = deploy(*APPLY)
    assert first.exit_code == 0, first.output
    change = _ops(first.stdout)
    assert set(change) == {h.host.name for h in hosts}, "every host reports its ops"
    assert {h["outcome"] for h in change.values()} == {"changed"}, change
    assert not _over(change, CHANGE_RUN_BUDGET), (
        f"the change run makes more SSH operations than budgeted {CHANGE_RUN_BUDGET}: "
        f"{_over(change, CHANGE_RUN_BUDGET)}"
    )
    # Exactly: the lock's answer, then one wait for the writes, the check and the commit.
    assert {host: ops["wait"] for host, ops in change.items()} == dict.fromkeys(change, 2), change
    for kimi in hosts:
        # The compile check sent with the lock found no record of the original bytes and
        # compiled nothing (deploy.checks.compile.AHEAD_VARIABLE): only the new bytes were
        # compiled, and recorded, by the run.
        records = {p.name for p in (kimi.host.state_dir / "compiled").iterdir()}
        assert records == {hashlib.sha256(kimi.model_file.read_bytes()).hexdigest()}, records

    second = deploy(*APPLY)
    assert second.exit_code == 0, second.output
    rerun = _ops(second.stdout)
    assert {h["outcome"] for h in rerun.values()} == {"unchanged"}, rerun
    assert not _over(rerun, RERUN_BUDGET), (
        f"the no-change re-run makes more SSH operations than budgeted {RERUN_BUDGET}: "
        f"{_over(rerun, RERUN_BUDGET)}"
    )
    assert {host: ops["wait"] for host, ops in rerun.items()} == dict.fromkeys(rerun, 1), rerun


def test_only_files_read_before_any_command_come_with_the_lock(
    kimi_059: tuple[KimiHost, Deploy], tmp_path: Path
) -> None:
    """The lock's exec reads the files of the leading file steps (no round trip of their own);
    a file first read after a command step is read after it, as the command left it."""
    kimi, deploy = kimi_059
    other = kimi.model_file.parent / "other.txt"
    other.write_text("first\n")
    playbook = tmp_path / "order.yaml"
    playbook.write_text(
        "name: order\nhosts: all\nsteps:\n"
        f"  - verify_tail: {{path: {kimi.model_file}, last_line: '{ENTRY}'}}\n"
        f"  - verify_python: {{path: {kimi.model_file}, class_has: {{{CLASS}: [forward]}}}}\n"
        f"  - verify_command: {{run: 'echo second >> {other}'}}\n"
        f"  - verify_tail: {{path: {other}, last_line: second}}\n"
    )
    result = deploy("apply", str(playbook), "--yes", "--json")
    assert result.exit_code == 0, result.output
    (ops,) = _ops(result.stdout).values()
    # cmd: the command; call: kimi_k25.py, read with the lock (no wait of its own, read once),
    # then other.txt's read after the command; wait: the lock, the command, that read.
    assert (ops["exec"], ops["cmd"], ops["call"], ops["wait"], ops["sftp"]) == (1, 1, 2, 3, 0), ops


#: A slow link for the tests that time round trips: a lower bound a wait cannot beat, so these
#: tests cannot pass by luck on a loaded machine (they could only fail by load, not pass).
SLOW_RTT_MS = 400.0


def test_releasing_the_lock_waits_for_no_round_trip(ssh_host: SshHost, tmp_path: Path) -> None:
    """The release sends EOF and closes; it used to wait for the shell's exit status, one round
    trip per host at the end of every run (issue 17: 100 ms at 100 ms RTT). Through a 400 ms
    link, a release that waits for anything from the host takes at least 400 ms. The next run
    takes the lock at once all the same (the lock script waits for the ending shell)."""
    with DelayNetwork(SLOW_RTT_MS) as net:
        slow = replace(
            ssh_host, port=net.forward(ssh_host.port), known_hosts=tmp_path / "known_hosts"
        )
        (tmp_path / "known_hosts").write_text(slow.host_key_line() + "\n")
        remote = open_remote(slow)
        try:
            lock = acquire(remote, str(ssh_host.state_dir), {"run_id": "first"})
            began = time.monotonic()
            lock.release()
            took = time.monotonic() - began
        finally:
            remote.close()
    assert took < SLOW_RTT_MS / 2000, f"release took {took * 1000:.0f} ms: it waited for the host"
    again = open_remote(ssh_host)
    try:
        acquire(again, str(ssh_host.state_dir), {"run_id": "next"}).release()
    finally:
        again.close()


def test_help_imports_no_ssh_or_yaml() -> None:
    """``-X importtime`` lists every module the real command imports, on stderr."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "deploy.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {
        line.rpartition("|")[2].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "click" in imported, "importtime output not understood"
    heavy = sorted(
        name for name in imported if name.split(".")[0] in {"paramiko", "fabric", "yaml"}
    )
    assert not heavy, f"`deploy --help` imports {heavy}"


def test_the_connection_has_nagle_off(ssh_host: SshHost) -> None:
    """TCP_NODELAY: paramiko's login otherwise waits ~40 ms for a delayed ACK (connect.py)."""
    remote = open_remote(ssh_host)
    try:
        sock = remote.transport._transport().sock  # type: ignore[attr-defined]  # SshTransport
        assert isinstance(sock, socket.socket)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        remote.close()
