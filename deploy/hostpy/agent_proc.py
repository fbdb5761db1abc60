"""What ``/proc`` says, for the process agent (`deploy.hostpy.agent`): a part of its program.

Processes (state, group, session, command line, environment, working directory, interpreter),
who listens on a port (``/proc/net/tcp{,6}`` matched to each process's socket inodes), and
where a server's own interpreter would import a module from.
"""

import json
import os
import pwd
import shutil
import socket
import subprocess

# start_problem is the agent's: a program's parts share one namespace on the host.
# host-program: part (deploy.hostpy.program)
from deploy.hostpy.agent_trust import lookup_env, parse_status, run_as, start_problem, switcher  # noqa: F401

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
    # "start": field 22, clock ticks after boot: with the pid, which process this is (a pid
    # reused later has another start), so an undo knows the server its run started.
    return {
        "state": rest[0],
        "pgid": int(rest[2]),
        "sid": int(rest[3]),
        "start": int(rest[19]),
    }


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid):
    raw = _read(f"/proc/{pid}/cmdline", "rb")
    if not raw:
        return []
    return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")]


def _link(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _user(pid):
    ids = parse_status(_read(f"/proc/{pid}/status") or "")
    if ids is not None:
        try:
            ids["name"] = pwd.getpwuid(ids["uid"]).pw_name
        except KeyError:
            ids["name"] = None
    return ids


def start_ids(user, me):
    """How the start becomes ``user`` (the replaced server's uid, gid and groups), given the
    agent's own ``me`` = (euid, uid, gid): ``(ids, None)`` with ``ids`` to switch to in the
    child (None: start as the agent runs, as without ``user``: a server from the command
    template, or a journal record from before users were recorded), or ``(None, refusal)``."""
    if not user:
        return None, None
    try:
        uid, gid = int(user["uid"]), int(user["gid"])
        groups = [int(group) for group in user.get("groups") or []]
    except (KeyError, TypeError, ValueError):
        return None, "cannot tell whom to start the server as: " + repr(user)[:80]
    euid, ruid, rgid = me
    if euid == 0:
        return (uid, gid, groups), None
    if (euid, ruid, rgid) == (uid, uid, gid):
        return None, None  # already that user; it cannot change its groups, nor need to
    name = user.get("name") or "uid " + str(uid)
    return None, (
        f"cannot start the server as {name} (uid {uid}, gid {gid}) as the server it replaces "
        f"ran: deploy's process helper runs as uid {euid}, not root, and cannot switch users "
        "(log in as root or use become); not starting it as another user"
    )


def _alive(pid):
    fields = _stat_fields(pid)
    return fields is not None and fields["state"] not in ("Z", "X")


def _describe(pid, table=None):  # with a `_listen_table`: a listener's details, in full
    fields = _stat_fields(pid)
    if fields is None:
        return None
    info = {"pid": pid, "cmdline": _cmdline(pid), "cwd": _link(f"/proc/{pid}/cwd"), **fields}
    info["started_at"] = None  # the start (ticks after boot) as Unix time
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            info["started_at"] = int(line.split()[1]) + fields["start"] / os.sysconf("SC_CLK_TCK")
    if table is not None:
        raw = _read(f"/proc/{pid}/environ", "rb")
        pairs = (part.partition(b"=") for part in (raw or b"").split(b"\0") if b"=" in part)
        info["env"] = {
            k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, _, v in pairs
        }
        info["env_readable"] = raw is not None
        info["user"] = _user(pid)
        info["cgroup"] = (_read(f"/proc/{pid}/cgroup") or "")[:4096]  # unit, container, session
        info["exe"] = _link(f"/proc/{pid}/exe")
        info["listen"] = _listens_on(pid, table)
    return info


#: Run by the server's interpreter: where each module would be found, by asking every finder
#: on sys.meta_path level by level (as importlib does), so that no package's __init__ runs and
#: the model module itself is never imported. Editable installs' finders are honoured.
_FIND_SPEC = """
import json, sys, types
def find(name):
    parts, path, spec = name.split("."), None, None
    for i in range(len(parts)):
        full = ".".join(parts[: i + 1])
        spec = None
        for finder in sys.meta_path:
            method = getattr(finder, "find_spec", None)
            if method is not None:
                spec = method(full, path)
                if spec is not None:
                    break
        if spec is None:
            return {"error": "No module named " + repr(full)}
        if i < len(parts) - 1:
            if spec.submodule_search_locations is None:
                return {"error": full + " is not a package"}
            locations = spec.submodule_search_locations
            # A namespace package's _NamespacePath recomputes itself from sys.modules[parent]:
            # stand an empty module there (this process only exists to answer) whose __path__
            # is the directories the package was found in; no package code runs.
            path = list(getattr(locations, "_path", None) or locations)
            placeholder = types.ModuleType(full)
            placeholder.__path__ = path
            placeholder.__spec__ = spec
            sys.modules[full] = placeholder
    return {"origin": spec.origin}
def versions():
    # What the report records of the server's stack, read from installed metadata and
    # torch/version.py as text: no package code runs (torch is never imported).
    found = {}
    try:
        from importlib import metadata
    except ImportError:
        return found
    for dist in ("sglang", "torch"):
        try:
            found[dist] = metadata.version(dist)
        except Exception:
            pass
    try:
        text = metadata.distribution("torch").locate_file("torch/version.py").read_text()
    except Exception:
        return found
    for line in text.splitlines():
        if line.replace(" ", "").startswith("cuda:") or line.replace(" ", "").startswith("cuda="):
            value = line.split("=", 1)[-1].strip().strip(chr(39) + chr(34))
            if value and value != "None":
                found["cuda"] = value
    return found
answer = {name: find(name) for name in json.loads(sys.argv[1])}
answer[" versions"] = versions()  # not a module name: a space
print(json.dumps(answer))
"""


def _interpreter(info):
    """The server's interpreter as it was invoked (a venv's bin/python, which /proc/PID/exe
    resolves to the base interpreter and so loses the venv), if that is the same binary."""
    exe = info.get("exe")
    argv0 = (info.get("cmdline") or [""])[0]
    if argv0:
        if "/" in argv0:
            candidate = os.path.join(info.get("cwd") or "/", argv0)
        else:
            candidate = shutil.which(argv0, path=(info.get("env") or {}).get("PATH", ""))
        if candidate and exe and os.path.realpath(candidate) == os.path.realpath(exe):
            return candidate
    return exe


def resolve_imports(imports, python, env, cwd, pid=None):
    """Where ``python`` (with ``env`` and ``cwd``) finds each module, against the wanted file;
    ``pid``: the running server this stands for. Whom it runs as: `run_as` (each entry's
    ``ran_as`` says; refused: its ``error``)."""
    results = []
    ids, note, refused = run_as(python, env, cwd or "/", pid)
    try:
        if refused:
            raise ValueError(refused)
        argv = ["-c", _FIND_SPEC, json.dumps(sorted(imports))]
        done = _run_python(python, argv, env, cwd or "/", ids, 60)
        found = json.loads(done.stdout) if done.returncode == 0 else None
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        failure = None if found else (lines[-1] if lines else f"exit {done.returncode}")
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        found, failure = None, str(exc)
    for module, wanted in sorted(imports.items()):
        entry = {"module": module, "python": python, "cwd": cwd, "ran_as": note}
        entry["expected_real"] = os.path.realpath(wanted)
        answer = (found or {}).get(module) or {"error": failure or "no answer"}
        origin = answer.get("origin")
        entry["origin_real"] = os.path.realpath(origin) if origin else None
        entry["error"] = answer.get("error")
        entry["ok"] = bool(origin) and entry["origin_real"] == entry["expected_real"]
        entry["versions"] = (found or {}).get(" versions") or {}
        results.append(entry)
    return results


def _run_python(python, argv, env, cwd, ids, timeout):
    """``python argv`` with the server's ``env`` and ``cwd``; as ``ids`` when `run_as` gave
    some, with only the variables `lookup_env` keeps, the cwd entered after the switch."""
    return subprocess.run(
        [python, *argv],
        env=lookup_env(env, ids),
        cwd=cwd if ids is None else None,  # else entered as that user
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        preexec_fn=switcher(ids, cwd),
    )


def pycheck(args):
    """Run ``code`` (with ``argv``) under the server's interpreter, environment and cwd, as
    `resolve_imports` runs its lookup (the same trust rule decides whom it runs as), within
    ``timeout`` seconds: an import of the patched module, the new command line against the
    server's own argument parser. Answers ``ok``, ``status``, the last lines of its output
    (``tail``) and ``timed_out``."""
    python, env, cwd = args["python"], args.get("env") or {}, args.get("cwd") or "/"
    ids, _, refused = run_as(python, env, cwd, args.get("pid"))
    if refused:
        return {"error": refused}
    try:
        argv = ["-c", args["code"], *args.get("argv", [])]
        done = _run_python(python, argv, env, cwd, ids, float(args.get("timeout", 300)))
    except subprocess.TimeoutExpired:
        return {"ok": False, "timed_out": True, "tail": []}
    except OSError as exc:
        return {"error": "cannot run " + python + ": " + (exc.strerror or str(exc))}
    output = (done.stdout + done.stderr).decode("utf-8", "replace").strip().splitlines()
    return {"ok": done.returncode == 0, "status": done.returncode, "tail": output[-8:]}


def _address(hex_address):
    """/proc/net/tcp's little-endian hex address and port as ``1.2.3.4:80`` / ``[::1]:80``."""
    host, _, port = hex_address.partition(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{int(port, 16)}"
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"


def _listen_table():
    """socket inode -> address:port of every listening TCP socket on the host."""
    table = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (_read(path) or "").splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == TCP_LISTEN:
                table[f"socket:[{cols[9]}]"] = _address(cols[1])
    return table


def _fd_links(pid):
    """What the process's fds point to (``socket:[INODE]`` for a socket)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    return {_link(f"/proc/{pid}/fd/{fd}") for fd in fds} - {None}


def _listens_on(pid, table):
    return sorted({table[link] for link in _fd_links(pid) if link in table})


def _listening_inodes(port):
    """The sockets (``socket:[INODE]``, as an fd's link reads) listening on ``port``."""
    suffix = ":" + str(port)
    return {inode for inode, address in _listen_table().items() if address.endswith(suffix)}


def _listeners(port):
    targets = _listening_inodes(port)
    return [pid for pid in _pids() if targets and _fd_links(pid) & targets]
