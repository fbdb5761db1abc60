"""What the tests of handshakes ahead of the login share (test_handshake_ahead, _config,
_hostile): a playbook that selects the host but is invalid, an inventory edit, and a loopback
listener that stands where the run's connection goes (a decoy, a relay)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import yaml

from tests.integration.conftest import Deploy, KimiHost, Result

MakeHosts = Callable[..., tuple[list[KimiHost], Deploy]]

#: A playbook whose ``hosts:`` selects the host but whose step is invalid: found only after
#: the handshakes have started (the file is read as YAML first, validated afterwards).
BAD_PLAYBOOK = "name: bad\nhosts: gpu\nsteps:\n  - backup: {paths: [/etc/hostname]}\n"
BAD_LINE = "bad.yaml:4:13 steps[0].backup.path: missing required key 'path'"


def edit_inventory(deploy: Deploy, **changes: object) -> None:
    """Set ``changes`` on every host of the run's inventory."""
    document = yaml.safe_load(deploy.inventory.read_text())
    for entry in document["hosts"].values():
        entry.update(changes)
    deploy.inventory.write_text(yaml.safe_dump(document, sort_keys=False))


def bad_run(
    deploy: Deploy, *options: str, playbook: str = BAD_PLAYBOOK, line: str = BAD_LINE
) -> Result:
    """``deploy apply ./bad.yaml --yes OPTIONS`` with ``playbook`` as bad.yaml: it must exit 2
    with ``line`` as the one line on stderr."""
    (deploy.workdir / "bad.yaml").write_text(playbook)
    result = deploy("apply", "./bad.yaml", "--yes", *options)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"deploy: {line}"), result.stderr
    return result


class Listener:
    """A TCP listener on ``address:port`` (port 0: any free one, then ``self.port``) that
    hands every connection it accepts to `handle`, in its own thread, until `close`.

    The thread starts in ``__init__``: a subclass sets what `handle` uses before calling it.
    """

    def __init__(self, address: str = "127.0.0.1", port: int = 0) -> None:
        self.server = socket.create_server((address, port))
        self.server.settimeout(0.1)
        self.port = int(self.server.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.server.close()
