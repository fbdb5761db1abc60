"""Process helper that runs ON THE HOST: find, stop and start a server in one exec each.

Sent as the program text of ``python3 -c SOURCE OP``, its arguments as JSON on stdin (never
on the command line: no size limit from argv, and nothing readable in /proc/PID/cmdline by
other users), over one command in the run's session, so that finding the
listener on a port, stopping a process group with its orphans, or starting a detached server
costs one round trip instead of a dozen shell commands, and behaves the same on every Linux
host (it reads ``/proc``; no ``ss``, ``lsof`` or ``pgrep`` needed). Standard library only, and
no import from ``deploy``: the host does not have this package. It prints one JSON object.

Operations:

``probe {port, pid_file, prefix}``
    Who listens on the port (pid, process group, session, command line, working directory,
    environment), the pid recorded in ``pid_file`` if alive, and every process whose title
    starts with ``prefix`` (SGLang's ``sglang::scheduler_TP0`` and friends).
``stop {pids, pgids, sids, port, prefix, timeout}``
    SIGTERM to each process group, wait up to ``timeout`` (or 2 s after the main ``pids`` are
    gone), SIGKILL what is left; then SIGKILL
    ``prefix``-titled processes of those groups or sessions (SGLang orphans them, holding GPU
    memory and sometimes the port), and wait until nothing listens on the port.
``start {argv | command, cwd, env, env_mode, log_file, pid_file, header}``
    Start the server in its own session (``setsid``), stdin from /dev/null, stdout and stderr
    appended to ``log_file``, so the SSH session can end at once; record its pid.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

TCP_LISTEN = "0A"


def _read(path, mode="r"):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


def _stat_fields(pid):
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return {"state": rest[0], "ppid": int(rest[1]), "pgid": int(rest[2]), "sid": int(rest[3])}


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid):
    raw = _read(f"/proc/{pid}/cmdline", "rb")
    if not raw:
        return []
    return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")]


def _environ(pid):
    raw = _read(f"/proc/{pid}/environ", "rb")
    env = {}
    for part in (raw or b"").split(b"\0"):
        if b"=" in part:
            key, _, value = part.partition(b"=")
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def _alive(pid):
    fields = _stat_fields(pid)
    return fields is not None and fields["state"] not in ("Z", "X")


def _describe(pid, with_env=False):
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = None
    info = {"pid": pid, "cmdline": _cmdline(pid), "cwd": cwd, **fields}
    if with_env:
        info["env"] = _environ(pid)
    return info


def _listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (_read(table) or "").splitlines()[1:]:
            cols = line.split()
            if (
                len(cols) > 9
                and cols[3] == TCP_LISTEN
                and int(cols[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(cols[9])
    return inodes


def _listeners(port):
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    targets = {f"socket:[{inode}]" for inode in inodes}
    found = []
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def _titled(prefix):
    return [pid for pid in _pids() if prefix and (_cmdline(pid) or [""])[0].startswith(prefix)]


def _pid_from_file(path):
    raw = _read(path) if path else None
    try:
        pid = int((raw or "").strip())
    except ValueError:
        return None
    return pid if _alive(pid) else None


def probe(args):
    port = int(args["port"])
    listeners = [_describe(pid, with_env=True) for pid in _listeners(port)]
    recorded = _pid_from_file(args.get("pid_file"))
    return {
        "listeners": [item for item in listeners if item],
        "pid_file_pid": recorded,
        "pid_file_process": _describe(recorded, with_env=True) if recorded else None,
        "titled": [
            item for item in (_describe(pid) for pid in _titled(args.get("prefix"))) if item
        ],
    }


def _members(pgids, sids):
    mine = (os.getpgid(0), os.getsid(0))
    out = []
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields is None or fields["state"] in ("Z", "X") or pid == os.getpid():
            continue
        if (fields["pgid"], fields["sid"]) == mine:
            continue
        if fields["pgid"] in pgids or fields["sid"] in sids:
            out.append(pid)
    return out


def _wait_gone(pgids, sids, deadline, main=(), grace=2.0):
    """Wait until the groups are empty; give up early once the ``main`` pids are gone and only
    stragglers remain after ``grace`` seconds (SGLang's orphans ignore SIGTERM for ever)."""
    main_gone_at = None
    while time.monotonic() < deadline:
        if not _members(pgids, sids):
            return True
        if not any(_alive(pid) for pid in main):
            main_gone_at = main_gone_at or time.monotonic()
            if time.monotonic() - main_gone_at > grace:
                return False
        time.sleep(0.05)
    return not _members(pgids, sids)


def stop(args):
    began = time.monotonic()
    own = {os.getpgid(0)}
    pgids = {int(p) for p in args.get("pgids", [])} - own - {0, 1}
    sids = {int(s) for s in args.get("sids", [])} - {os.getsid(0), 0, 1}
    port = args.get("port")
    prefix = args.get("prefix") or ""
    timeout = float(args.get("timeout", 60))
    terminated = sorted(_members(pgids, set()))
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    killed = []
    main = [int(p) for p in args.get("pids", [])]
    if not _wait_gone(pgids, set(), time.monotonic() + timeout, main):
        killed = [
            {"pid": pid, "title": (_cmdline(pid) or ["?"])[0]}
            for pid in sorted(_members(pgids, set()))
        ]
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        _wait_gone(pgids, set(), time.monotonic() + 10)
    # Orphans: titled children of those groups or sessions, and whatever still holds the port.
    reaped = []
    suspects = set(_members(pgids, sids)) | (set(_listeners(int(port))) if port else set())
    for pid in sorted(suspects):
        title = (_cmdline(pid) or [""])[0]
        fields = _stat_fields(pid)
        ours = fields is not None and (fields["pgid"] in pgids or fields["sid"] in sids)
        if (prefix and title.startswith(prefix)) or ours:
            try:
                os.kill(pid, signal.SIGKILL)
                reaped.append({"pid": pid, "title": title})
            except ProcessLookupError:
                pass
    port_free = True
    if port:
        deadline = time.monotonic() + 10
        while _listening_inodes(int(port)) and time.monotonic() < deadline:
            time.sleep(0.05)
        port_free = not _listening_inodes(int(port))
    return {
        "terminated": terminated,
        "killed": killed,
        "reaped": reaped,
        "port_free": port_free,
        "holders": [_describe(pid) for pid in _listeners(int(port))]
        if port and not port_free
        else [],
        "elapsed": round(time.monotonic() - began, 3),
    }


def start(args):
    log_file = args["log_file"]
    os.makedirs(os.path.dirname(log_file), mode=0o700, exist_ok=True)
    if args.get("env_mode") == "exact":
        env = dict(args.get("env") or {})
    else:
        env = dict(os.environ)
        env.update(args.get("env") or {})
    argv = args.get("argv") or ["/bin/sh", "-c", "exec " + args["command"]]
    with open(log_file, "ab") as log:
        log.write((args.get("header") or "").encode() + b"\n")
        log.flush()
        offset = log.tell()
        try:
            child = subprocess.Popen(
                argv,
                cwd=args.get("cwd") or "/",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            return {"error": f"cannot start {argv[0]}: {exc.strerror or exc}"}
    pid_file = args.get("pid_file")
    if pid_file:
        tmp = pid_file + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(f"{child.pid}\n")
        os.replace(tmp, pid_file)
    child.returncode = 0  # detached on purpose: silence Popen's "still running" warning
    return {
        "pid": child.pid,
        "pgid": child.pid,
        "sid": child.pid,
        "log_offset": offset,
        "argv": argv,
    }


def main():
    operation = sys.argv[1]
    args = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    result = {"probe": probe, "stop": stop, "start": start}[operation](args)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
