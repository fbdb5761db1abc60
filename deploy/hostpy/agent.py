"""Process helper that runs ON THE HOST: find, stop and start a server in one exec each.

Sent as ``python3 -c SOURCE OP`` in the run's session, its arguments as JSON on stdin
(`deploy.services.helper` says why); it prints one JSON object. So finding a port's listener, stopping a process group with its orphans or starting a detached
server costs one round trip, not a dozen shell commands, and reads ``/proc`` the same way on
every Linux host (no ``ss``, ``lsof`` or ``pgrep``). Operations:

``probe {port, pid_file, prefix, imports?, fallback?}``
    Who listens on the port (pid, group, session, command line, cwd, environment,
    interpreter, and every address:port each listens on) and the process whose pid
    ``pid_file`` holds, if alive and started when the file says. With ``imports`` ({module: file}): where the server's own
    interpreter, environment and cwd (else ``fallback``'s) find each module, without
    importing it or its packages, compared with the file after realpath.
``stop {pids, pgids, sids, port, timeout, drain_pids?, drain_timeout?}``
    SIGTERM to ``drain_pids`` first (SGLang's main process finishes its in-flight requests
    while its schedulers work) for up to ``drain_timeout``; then SIGTERM to each group, up to
    ``timeout`` (or 2 s after the main ``pids`` are gone), SIGKILL what is left of them and of
    the sessions (SGLang orphans its schedulers, holding GPU memory and sometimes the port),
    and wait until nothing listens on the port.
``pycheck {python, env, cwd, pid?, code, argv, timeout}``
    `deploy.hostpy.agent_proc.pycheck`: the checks made before a running server is stopped.
``start {argv | command, cwd, env, env_mode, env_unset?, log_file, pid_file, header, user?}``
    Start the server in its own session (``setsid``), stdin /dev/null, output appended to
    ``log_file`` (opened here, in deploy's own directory: the server needs no right to it),
    so the SSH session can end at once; record its pid. With ``user`` (whom the replaced
    server ran as): as that user (`start_ids`).
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

# host-program: part (deploy.hostpy.program)
from deploy.hostpy.agent_proc import (
    _alive,
    _cmdline,
    _describe,
    _interpreter,
    _listen_table,
    _listeners,
    _listening_inodes,
    _pids,
    _read,
    _stat_fields,
    pycheck,
    resolve_imports,
    start_ids,
    start_problem,
    switcher,
)


def probe(args):
    port = int(args["port"])
    table = _listen_table()
    listeners = [item for item in (_describe(pid, table) for pid in _listeners(port)) if item]
    raw = (_read(args.get("pid_file") or "") or "").split()  # "PID START": start in ticks
    recorded = int(raw[0]) if raw and raw[0].isdecimal() else None
    process = _describe(recorded, table) if recorded and _alive(recorded) else None
    if process and len(raw) > 1 and raw[1] != str(process["start"]):
        process = None  # the pid is another process's now (pids wrap; a reboot starts anew)
    for info in [process, *listeners]:
        if info and not _titled_by(info, args.get("prefix")):
            # Why starting it again as it runs (same argv, env, cwd and user) would not be safe.
            uid = (info.get("user") or {}).get("uid")
            info["start_problem"] = f"cannot tell whom pid {info['pid']} runs as"
            if uid is not None:
                argv, env = info.get("cmdline") or [], info.get("env") or {}
                cwd = info.get("cwd") or "/"
                info["start_problem"] = start_problem(_interpreter(info), argv, env, cwd, int(uid))
    answer = {
        "listeners": listeners,
        "pid_file_process": process,
        "helper_ids": [os.geteuid(), os.getuid(), os.getgid()],  # whom `start` could run as
        # our own cgroup: a server in the same one was started from a login like ours
        "helper_cgroup": (_read("/proc/self/cgroup") or "")[:4096],
    }
    if args.get("imports"):
        answer["imports"] = _probe_imports(args["imports"], args, answer)
    return answer


def _titled_by(info, prefix):
    return bool(prefix) and (info.get("cmdline") or [""])[0].startswith(prefix)


def _probe_imports(imports, args, answer):
    """Resolve ``imports`` with the server's interpreter (the one the caller will stop)."""
    info = answer["pid_file_process"]
    if info is None:  # a listener someone started, not an orphan; the group leader first
        servers = [item for item in answer["listeners"] if not _titled_by(item, args.get("prefix"))]
        servers.sort(key=lambda item: (item["pid"] != item["pgid"], item["pid"]))
        info = servers[0] if servers else None
    if info is not None:
        if not info.get("env_readable"):
            return {"error": f"cannot read the environment of pid {info['pid']} (another user?)"}
        python = _interpreter(info)
        if not python:
            return {"error": f"cannot read the interpreter of pid {info['pid']}"}
        return {
            "source": f"pid {info['pid']}",
            "results": resolve_imports(
                imports, python, info.get("env") or {}, info.get("cwd"), info["pid"]
            ),
        }
    fallback = args.get("fallback") or {}
    env = {**os.environ, **{k: v for k, v in (fallback.get("env") or {}).items() if v != ""}}
    python = fallback.get("python") or "python3"
    if "/" not in python:
        python = shutil.which(python, path=env.get("PATH", "")) or python
    return {
        "source": "the service's python",
        "results": resolve_imports(imports, python, env, fallback.get("cwd")),
    }


def _members(pgids, sids=()):
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


def _wait_gone(pgids, deadline, main=None):
    """Wait until the groups are empty; give up early once the ``main`` pids are gone (or none
    were known: ``[]``) and only stragglers remain after 2 s (SGLang's orphans ignore SIGTERM
    for ever). With ``main`` None (after SIGKILL) the whole time: a process that held GPUs and
    much memory can take seconds to finish dying."""
    main_gone_at = None
    while time.monotonic() < deadline:
        if not _members(pgids):
            return True
        if main is not None and not any(_alive(pid) for pid in main):
            main_gone_at = main_gone_at or time.monotonic()
            if time.monotonic() - main_gone_at > 2.0:
                return False
        time.sleep(0.05)
    return not _members(pgids)


def _drain(args):
    pids = [int(p) for p in args.get("drain_pids", []) if int(p) > 1 and int(p) != os.getpid()]
    timeout = float(args.get("drain_timeout") or 0)
    if not pids or timeout <= 0:
        return {}
    began = time.monotonic()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    while any(_alive(pid) for pid in pids) and time.monotonic() - began < timeout:
        time.sleep(0.05)
    return {
        "drained": not any(_alive(pid) for pid in pids),
        "drain_s": round(time.monotonic() - began, 3),
    }


def stop(args):
    pgids = {int(p) for p in args.get("pgids", [])} - {os.getpgid(0), 0, 1}
    sids = {int(s) for s in args.get("sids", [])} - {os.getsid(0), 0, 1}
    port = int(args.get("port") or 0)  # 0: none (nothing listens on port 0)
    timeout = float(args.get("timeout", 60))
    drained = _drain(args)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    killed = []
    main = [int(p) for p in args.get("pids", [])]
    if not _wait_gone(pgids, time.monotonic() + timeout, main):
        killed = [
            {"pid": pid, "title": (_cmdline(pid) or ["?"])[0]} for pid in sorted(_members(pgids))
        ]
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        _wait_gone(pgids, time.monotonic() + 10)
    # Orphans: what is left in those groups or sessions; only that tree: a process holding the
    # port outside it is not ours to kill (issue 32: root's schedulers were killed for another
    # user's listener).
    reaped = []
    for pid in sorted(_members(pgids, sids)):
        title = (_cmdline(pid) or [""])[0]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            reaped.append({"pid": pid, "title": title})
    deadline = time.monotonic() + 10
    while _listening_inodes(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    port_free = not _listening_inodes(port)
    return {
        **drained,
        "killed": killed,
        "reaped": reaped,
        "port_free": port_free,
        "holders": [] if port_free else [_describe(pid) for pid in _listeners(port)],
    }


def start(args):
    user = args.get("user")
    ids, refusal = start_ids(user, (os.geteuid(), os.getuid(), os.getgid()))
    if refusal:  # before anything is created: not even the log
        return {"error": refusal}
    log_file = args["log_file"]
    os.makedirs(os.path.dirname(log_file), mode=0o700, exist_ok=True)
    if args.get("env_mode") == "exact":
        env = dict(args.get("env") or {})
    else:
        env = dict(os.environ)
        env.update(args.get("env") or {})
        for name in args.get("env_unset") or []:
            env.pop(name, None)
    argv = args.get("argv") or ["/bin/sh", "-c", "exec " + args["command"]]
    if args.get("argv"):  # a server's own argv again (a restart, an undo): judged as it runs
        cwd = args.get("cwd") or "/"
        found = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", ""))
        first = os.path.join(cwd, found or argv[0])
        python = _argv_interpreter(first, env)
        problem = start_problem(
            python, [first, *argv[1:]], env, cwd, ids[0] if ids else os.geteuid()
        )
        if problem:
            return {"error": "refusing to start " + argv[0] + ": " + problem}
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
                preexec_fn=switcher(ids),  # groups, gid, uid, in that order, before the exec
            )
        except (OSError, subprocess.SubprocessError) as exc:
            who = f" as uid {ids[0]}" if ids else ""
            return {
                "error": f"cannot start {argv[0]}{who}: {getattr(exc, 'strerror', None) or exc}"
            }
    tmp = args["pid_file"] + ".tmp"  # its one client always names one
    start = (_stat_fields(child.pid) or {}).get("start")
    with open(tmp, "w") as handle:
        handle.write(f"{child.pid} {start}\n" if start is not None else f"{child.pid}\n")
    os.replace(tmp, args["pid_file"])
    child.returncode = 0  # detached on purpose: silence Popen's "still running" warning
    return {
        "pid": child.pid,  # its group and session too (start_new_session)
        "start": start,
        "log_offset": offset,
        "argv": argv,
        "user": user or None,
    }


def _argv_interpreter(first, env):
    """The interpreter the program at ``first`` (absolute) starts: itself when it is a python,
    else the one its ``#!`` line names; None when neither says."""
    if os.path.basename(first).startswith("python"):
        return first
    try:
        with open(first, "rb") as handle:
            line = handle.readline(512)
    except OSError:
        return None
    words = line[2:].split() if line.startswith(b"#!") else []
    if words and os.path.basename(words[0]) == b"env" and len(words) > 1:
        return shutil.which(words[1].decode(errors="replace"), path=env.get("PATH", ""))
    return words[0].decode(errors="replace") if words else None


def main():
    operation = sys.argv[1]
    args = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    result = {"probe": probe, "stop": stop, "start": start, "pycheck": pycheck}[operation](args)
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
