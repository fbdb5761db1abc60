"""`LocalHost` itself: the transport contract the rest of deploy relies on, on local processes.

Commands (exit status, stdout, stderr, stdin, timeouts) with and without the lock's session,
HTTP through `Host.http` to a loopback port (refused = `ServerUnavailable`), and the
state_dir trust check of the real lock script.
"""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest

from deploy.errors import LockHeld, StateDirUntrusted
from deploy.remote.http import ServerUnavailable
from deploy.remote.lock import acquire
from tests.unit.local_host import LocalHost
from tests.unit.local_rig import LocalRig


def test_commands_report_status_output_and_take_stdin(local_host: LocalHost, private: Path) -> None:
    result = local_host.run("cat; echo out; echo err >&2; pwd; exit 3", stdin=b"in\n")
    assert (result.exit_status, result.stdout, result.stderr) == (
        3,
        f"in\nout\n{private}\n",
        "err\n",
    )
    assert local_host.ops["exec"] == 1


def test_an_exec_timeout_is_reported(local_host: LocalHost) -> None:
    result = local_host.run("sleep 5", timeout=0.3)
    assert result.timed_out and result.exit_status == -1
    assert result.duration < 3


def test_under_the_lock_commands_run_in_its_session(local_host: LocalHost, private: Path) -> None:
    lock = acquire(local_host, str(private / "state"), {"run_id": "t"})
    try:
        assert local_host.session is not None
        assert local_host.run("echo hi").stdout == "hi\n"
        timed = local_host.run("sleep 5", timeout=1)
        assert timed.timed_out, "timeout(1) stopped the command on the host"
        assert local_host.run("echo after").stdout == "after\n", "the session survives a timeout"
        assert local_host.ops["exec"] == 1 and local_host.ops["cmd"] == 3
        other = LocalHost("other", home=str(private)).open()
        try:
            with pytest.raises(LockHeld, match="run t"):
                acquire(other, str(private / "state"), {"run_id": "u"})
        finally:
            other.close()
    finally:
        lock.release()
    assert local_host.session is None


def test_state_dir_under_a_writable_parent_is_untrusted(
    local_host: LocalHost, private: Path
) -> None:
    shared = private / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # no sticky bit: anyone could swap state_dir
    with pytest.raises(StateDirUntrusted, match="writable by group or others"):
        acquire(local_host, str(shared / "state"), {"run_id": "t"})
    assert not (shared / "state").exists(), "nothing was created or read there"


def test_a_refusal_is_reported_even_when_the_reads_sent_ahead_are_never_read(
    local_host: LocalHost, private: Path
) -> None:
    # The shell refuses and exits before it reads what was sent with the lock's exec: with
    # more than a pipe's worth sent ahead, the sending breaks (EPIPE). The refusal is still
    # the answer, not "connection lost" (seen as a flaky run under CI's load).
    shared = private / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    ahead = [str(private / f"{'x' * 200}{n}") for n in range(2000)]  # ~400 kB of requests
    with pytest.raises(StateDirUntrusted, match="writable by group or others"):
        acquire(local_host, str(shared / "state"), {"run_id": "t"}, prefetch=ahead)


def test_an_untrusted_state_dir_leaves_the_host_not_attempted(rig: LocalRig) -> None:
    os.chmod(rig.root, 0o775)
    target = rig.files / "f.txt"
    target.write_bytes(b"a\n")
    rig.write_inventory(target=str(target))
    run = rig.apply(rig.playbook("append", [{"append": {"path": "{{ target }}", "text": "b\n"}}]))
    assert run.exit_code == 4
    assert run.hosts[0].outcome == "not attempted"
    assert "state_dir untrusted" in (run.hosts[0].error or "")
    assert target.read_bytes() == b"a\n"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_http_reaches_a_loopback_port_and_only_loopback(local_host: LocalHost) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        response = local_host.http("127.0.0.1", port, "GET", "/health", timeout=5)
        assert response.status == 200 and response.json() == {"ok": True}
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ServerUnavailable):
        local_host.http("127.0.0.1", port, "GET", "/health", timeout=5)  # closed now: refused
