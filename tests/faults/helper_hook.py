"""The fault suite's file helper: the shipped one plus a hook that stops it inside a request.

The helper that runs on hosts (`deploy.hostpy.fileagent`) carries no test hook (issue 32):
this module builds the suite's variant — the shipped program text with `HOOK` put before its
``__main__`` block, where it replaces ``read_payload`` — and runs ``deploy`` with it
(``python -m tests.faults.helper_hook ARGS``, what `tests.faults.conftest` runs instead of
``python -m deploy.cli``). The hook reads its rule from the file `FAULT_ENV` names, which the
sandbox sshd's ``SetEnv`` gives the helper's sessions (`tests.faults.harness.HelperStop`).
"""

from __future__ import annotations

import runpy

FAULT_ENV = "DEPLOY_FILEAGENT_FAULT"

#: Put into the helper's program before its ``__main__`` block. ``{"op", "path" (an fnmatch
#: pattern), "nth", "after_bytes", "marker"}``: in the ``nth`` matching request, after
#: ``after_bytes`` of its payload were read, the helper writes ``marker`` (what it received)
#: and stops itself (SIGSTOP). The test then injects its fault (cuts the connection, kills the
#: workstation) and kills this process: the host has exactly that part of the request when
#: the connection is lost, whatever the buffers held.
HOOK = r"""
def _fault_rule():
    name = os.environ.get("DEPLOY_FILEAGENT_FAULT")
    if not name:
        return None
    try:
        with open(name, "rb") as rule_file:
            rule = loads(rule_file.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    rule["seen"] = 0
    return rule


_FAULT_RULE = _fault_rule()


def read_payload(header, size):
    import fnmatch
    import signal

    rule = _FAULT_RULE
    if not rule:
        return _read_exactly(0, size)
    args = loads(header.decode("utf-8"))
    if args.get("op") != rule.get("op") or not fnmatch.fnmatchcase(
        str(args.get("path")), rule.get("path", "")
    ):
        return _read_exactly(0, size)
    rule["seen"] += 1
    if rule["seen"] != rule.get("nth", 1):
        return _read_exactly(0, size)
    head = _read_exactly(0, min(int(rule.get("after_bytes", 0)), size))
    seen = {"pid": os.getpid(), "op": args["op"], "path": args["path"]}
    seen.update(received=len(head), total=size)
    with open(rule["marker"] + ".part", "w") as marker:
        marker.write(dumps(seen))
    os.rename(rule["marker"] + ".part", rule["marker"])
    os.kill(os.getpid(), signal.SIGSTOP)
    return head + _read_exactly(0, size - len(head))

"""

_MAIN = 'if __name__ == "__main__":'


def hooked(source: str) -> str:
    """``source`` (the helper's program) with `HOOK` before its ``__main__`` block."""
    where = source.rindex(_MAIN)
    return source[:where] + HOOK + source[where:]


def main() -> None:
    """``deploy`` with the hooked helper: the same CLI, the same program but for `HOOK`."""
    from deploy.remote import hostfiles, lock

    hostfiles.HELPER_SOURCE = lock.HELPER_SOURCE = hooked(hostfiles.HELPER_SOURCE)
    runpy.run_module("deploy.cli", run_name="__main__")


if __name__ == "__main__":
    main()
