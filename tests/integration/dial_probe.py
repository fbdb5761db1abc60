"""``deploy`` with its connects made ahead observed, as `tests.integration.test_dial_ahead`
runs it: each `deploy.remote.dial.start` and `take` appends a JSON line to the file
``DIAL_PROBE_LOG`` names (whether paramiko was imported yet; what was dialed and taken)."""

import json
import os
import runpy
import sys

from deploy.remote import dial

_start, _take = dial.start, dial.take


def _note(**event: object) -> None:
    with open(os.environ["DIAL_PROBE_LOG"], "a") as log:
        log.write(json.dumps(event) + "\n")


def start(targets, ssh_configs):  # type: ignore[no-untyped-def]
    targets = list(targets)
    dialed = _start(targets, ssh_configs)
    _note(event="start", paramiko="paramiko" in sys.modules, targets=targets, dialed=dialed)
    return dialed


def take(host, port):  # type: ignore[no-untyped-def]
    sock = _take(host, port)
    _note(event="take", target=[host, port], socket=sock is not None)
    return sock


dial.start, dial.take = start, take
runpy.run_module("deploy.cli", run_name="__main__", alter_sys=True)
