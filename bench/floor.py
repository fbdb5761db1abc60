"""The floor: connect to every host with paramiko, run ``true``, disconnect — all in parallel.

Run as a script by path (``python bench/floor.py HOSTS.json``), not through the ``bench``
package, so that the process imports paramiko and the standard library and nothing else. Its
wall time is what any paramiko-based tool must pay at least for one exec per host: interpreter
start, paramiko import, key exchange, public-key authentication, one login shell on the host
(root's ``.bashrc`` included), teardown. Host keys are checked against the same known_hosts as
every other tool (``RejectPolicy``), since skipping that check would be a cheat.

``HOSTS.json`` is a list of ``{address, port, user, identity_file, known_hosts}``. With
``--execs K`` each host runs ``true`` K times, one exec after the other on the same connection.
With ``--parallel P`` at most P hosts at a time (default: all of them).
With ``--nodelay`` the TCP socket has Nagle's algorithm off (TCP_NODELAY), as deploy's has:
paramiko leaves it on, and its login then waits ~40 ms for a delayed ACK.
Exit status 0 if every ``true`` succeeded, 1 otherwise (one line per failure on stderr).
"""

from __future__ import annotations

import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import paramiko


def touch(host: dict[str, Any], execs: int = 1, nodelay: bool = False) -> str | None:
    """Connect, run ``true`` ``execs`` times, close; None on success, else what went wrong."""
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(host["known_hosts"])
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        sock = None
        if nodelay:
            sock = socket.create_connection((host["address"], int(host["port"])), timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(
            host["address"],
            port=int(host["port"]),
            username=host["user"],
            key_filename=host["identity_file"],
            look_for_keys=False,
            allow_agent=False,
            timeout=30,
            sock=sock,
        )
        for _ in range(execs):
            _, stdout, _ = client.exec_command("true", timeout=30)
            status = stdout.channel.recv_exit_status()
            if status != 0:
                return f"{host['port']}: `true` exited {status}"
        return None
    except (paramiko.SSHException, OSError) as exc:
        return f"{host['port']}: {type(exc).__name__}: {exc}"
    finally:
        client.close()


def main(argv: list[str]) -> int:
    execs = int(argv[argv.index("--execs") + 1]) if "--execs" in argv else 1
    nodelay = "--nodelay" in argv
    with open(argv[1]) as handle:
        hosts = json.load(handle)
    parallel = int(argv[argv.index("--parallel") + 1]) if "--parallel" in argv else len(hosts)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        failures = [f for f in pool.map(lambda h: touch(h, execs, nodelay), hosts) if f]
    for failure in failures:
        print(f"floor: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
