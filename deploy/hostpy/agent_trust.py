"""Who may run the server's interpreter for the module lookup: a part of the process agent.

`deploy.hostpy.agent_proc.resolve_imports` starts the server's own interpreter, with its
environment and cwd, to find where a module would load from. That start runs code from its
standard library, ``pyvenv.cfg``'s ``home``, every ``.pth`` in its site directories, the cwd
(first on ``sys.path`` under ``-c``), that environment's ``PYTHONPATH``/``PYTHONHOME``/``HOME``
and ``LD_PRELOAD``. The agent is root, so whoever can change any of these would run code as
root. Rule (each path judged by `deploy.hostpy.trust_rule`, as written and resolved, with every
directory above):

- a server running as another user (not root, not the login user) is looked up as that user,
  with its groups: it sees what the server sees;
- otherwise every path below must be owned by root or the login user and not be writable by
  group or others (a root-owned sticky parent passes): the interpreter, its ``pyvenv.cfg`` and
  ``home``, the standard library and site directories of its prefixes (and ``PYTHONHOME``'s),
  the user site of ``HOME``/``PYTHONUSERBASE``, each ``PYTHONPATH`` entry and the cwd, each
  ``LD_LIBRARY_PATH`` directory and ``LD_PRELOAD`` object;
- if one is not, the lookup runs as the one other user who owns them; with none to pick (a
  path anyone may write, or two owners) it is refused, in one line;
- run as another user, it gets only the variables that decide imports (`lookup_env`): neither
  root's nor the server's secrets.
"""

import glob
import os
import pwd
import shutil

# host-program: part (deploy.hostpy.program)
from deploy.hostpy.trust_rule import OTHER_OWNER, WRITABLE, verdict

_SITE = (
    "lib",
    "lib64",
    "lib/python3*",
    "lib64/python3*",
    "lib/python3*/encodings",
    "lib/python3*/lib-dynload",
    "lib/python3*/site-packages",
    "lib64/python3*/site-packages",
    "lib/python3*/dist-packages",  # python3* matches python3 itself
    "local/lib/python3*/dist-packages",
)


def _walk(path, depth=0):
    """Every path resolving ``path`` looks at: each component in the directory it is really
    found in and, for a symbolic link, what its target goes through, recursively. Judging
    these, not only ``path`` and its realpath, covers the directories above a link's target
    that resolution passes through: their owner could swap the target between the check and
    the start (tests/unit/test_interpreter_attacks.py)."""
    out, here = [], ""
    for name in path.split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            here = here.rpartition("/")[0]
            continue
        entry = here + "/" + name
        out.append(entry)
        if depth < 40 and os.path.islink(entry):
            try:
                target = os.readlink(entry)
            except OSError:
                target = ""
            if target:
                out += _walk(target if target.startswith("/") else here + "/" + target, depth + 1)
            here = os.path.realpath(entry)
        else:
            here = entry
    return out


def _venv_home(python):
    """(pyvenv.cfg, its first ``home``) as Python reads them for ``python``, or (None, None):
    CPython's getpath stops at the first ``home`` line."""
    here = python.rpartition("/")[0]
    for directory in (here, here.rpartition("/")[0]):
        cfg = directory + "/pyvenv.cfg"
        if directory and os.path.isfile(cfg):
            home = ""
            with open(cfg, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    key, eq, value = line.partition("=")
                    if eq and key.strip().lower() == "home":
                        home = value.strip()
                        break
            return cfg, home
    return None, None


def lookup_paths(python, env, cwd):
    """Every path the lookup's trust depends on (module docstring); a reason when one cannot
    be judged (a relative interpreter or home), else None."""
    if not python.startswith("/"):
        return [], python + " is not an absolute path"
    real = os.path.realpath(python)
    for pth in (python + "._pth", real + "._pth"):  # CPython's sys.path from its lines
        if os.path.lexists(pth):
            return [], pth + " replaces sys.path (not judged)"
    paths = ["/", *_walk(python)]
    prefixes = [real.rpartition("/")[0].rpartition("/")[0]]
    cfg, home = _venv_home(python)
    if cfg is not None:
        if not home.startswith("/"):
            return [], cfg + " names no absolute home (" + home + ")"
        paths += [cfg, *_walk(home)]
        prefixes += [cfg.rpartition("/")[0], os.path.realpath(home).rpartition("/")[0]]
    if env.get("PYTHONHOME"):
        prefixes += env["PYTHONHOME"].split(":")
    user = env.get("PYTHONUSERBASE") or (env.get("HOME", "") + "/.local" if env.get("HOME") else "")
    if user:
        prefixes.append(user)
    for prefix in prefixes:
        paths += _walk(prefix)
        for pattern in _SITE:
            paths += glob.glob(glob.escape(prefix) + "/" + pattern)
    for variable in ("LD_LIBRARY_PATH", "LD_PRELOAD"):  # ld.so reads them before Python runs
        for entry in (env.get(variable) or "").replace(" ", ":").split(":"):
            if entry.startswith("/"):
                paths += _walk(entry)
    cwd = cwd or "/"
    entries = [cwd] + (env["PYTHONPATH"].split(":") if env.get("PYTHONPATH") else [])
    for entry in entries:  # a relative entry (or an empty one: the cwd) is found from the cwd
        paths += _walk(entry if entry.startswith("/") else cwd + "/" + entry)
    return list(dict.fromkeys(paths)), None


def judge(paths, me):
    """`judge_stats` for ``paths`` as they are now; one that does not exist is left out, as
    the shell's ``stat`` does."""
    stats = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        stats.append((path, st.st_uid, st.st_mode))
    return judge_stats(stats, me)


def judge_stats(stats, me):
    """(reason or None, the one other owner's uid or None) for ``(path, uid, mode)`` items,
    each judged by `deploy.hostpy.trust_rule.verdict` (worded as ``judge.sh`` words it): the
    first path writable by group or others, else the first owned by another user. The uid is
    -1 when there is nobody to pick (two other owners, or a path anyone may write)."""
    reason, owner, writable = None, None, None
    for path, uid, mode in stats:
        found = verdict(uid, mode, me)
        if found == OTHER_OWNER:
            reason = reason or f"{path} is owned by {_name(uid)} (uid {uid})"
            owner = uid if owner in (None, uid) else -1
        elif found == WRITABLE:
            if writable is None:  # anyone may change it: the reason to give
                writable = (
                    f"{path} is writable by group or others"
                    f" (mode {mode & 0o7777:o}, owner {_name(uid)})"
                )
            owner = -1
    return writable or reason, owner


def script_of(argv, env, cwd):
    """The file whose directory Python puts first on ``sys.path`` for ``argv``: the script a
    ``python`` runs (none for ``-m``/``-c``: the cwd, judged anyway), or ``argv[0]`` itself
    when it is not an interpreter (a console script: its ``#!`` starts one). None if none."""
    if not argv:
        return None
    first = argv[0]
    if not os.path.basename(first).startswith("python"):
        found = first if "/" in first else shutil.which(first, path=env.get("PATH", ""))
        return found if found is None or found.startswith("/") else cwd + "/" + found
    skip = False
    for word in argv[1:]:
        if skip:
            skip = False
            continue
        if word in ("-m", "-c", "-"):
            return None
        if word in ("-X", "-W", "--check-hash-based-pycs"):
            skip = True
            continue
        if word.startswith("-"):
            continue
        return word if word.startswith("/") else (cwd or "/") + "/" + word
    return None


def start_problem(python, argv, env, cwd, uid):
    """Why starting ``argv`` with ``python``, ``env`` and ``cwd`` as ``uid`` would run code
    from a path another user can change; None when nobody but root and ``uid`` can (issue 32):
    the lookup's paths (`lookup_paths`) and the script's own directory, judged for the user
    the server runs as (a root server whose cwd another user owns would run a module planted
    there as root: ``python -m`` puts the cwd first on ``sys.path``)."""
    if not python:  # not a Python program (``sh -c``, a binary): judge what is executed
        first = argv[0] if argv else ""
        if not first.startswith("/"):
            return "cannot tell which program " + (first or "the server") + " is"
        return judge(["/", *_walk(first)], uid)[0]
    paths, reason = lookup_paths(python, env, cwd)
    if reason is not None:
        return reason
    script = script_of(argv, env, cwd or "/")
    if script:
        paths += _walk(script.rpartition("/")[0] or "/")
        paths.append(script)
    reason, _ = judge(paths, uid)
    return reason


def _name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "UNKNOWN"


def parse_status(text, column=0):
    """The uid, gid and supplementary groups in a ``/proc/PID/status`` text, as ``{"uid",
    "gid", "groups"}``; None when a field is missing or malformed. ``column`` 0: the real ids,
    whom a server runs as (a set-uid helper's effective id is not the operator's choice); 1:
    the effective ones."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.split()
    try:
        return {
            "uid": int(fields["Uid"][column]),
            "gid": int(fields["Gid"][column]),
            "groups": [int(group) for group in fields.get("Groups", [])],
        }
    except (KeyError, IndexError, ValueError):
        return None


def run_as(python, env, cwd, pid=None):
    """How to start the lookup: ``(None, None, None)`` as we are; ``(ids, note, None)``
    with ``ids`` = (uid, gid, groups) to switch to and the note the report shows; or
    ``(None, None, refusal)``."""
    me = os.geteuid()
    if pid is not None:
        try:
            with open(f"/proc/{pid}/status") as handle:
                ids = parse_status(handle.read(), 1)  # effective: whom it acts as now
        except OSError:
            ids = None
        if ids is None:
            return None, None, f"cannot read whom pid {pid} runs as"
        uid, gid, groups = ids["uid"], ids["gid"], ids["groups"]
        if uid not in (0, me):
            if me != 0:
                return None, None, None
            note = f"as {_name(uid)} (uid {uid}), the user pid {pid} runs as"
            return (uid, gid, groups), note, None
    paths, reason = lookup_paths(python, env, cwd)
    owner = -1
    if reason is None:
        reason, owner = judge(paths, me)
    if reason is None or me != 0:
        return None, None, None
    if owner is None or owner < 0:
        why = "no single user owns it to run it as"
        return None, None, f"refusing to run {python} as root: {reason}; {why}"
    try:
        entry = pwd.getpwuid(owner)
    except KeyError:
        return None, None, f"refusing to run {python} as root: {reason}; uid {owner} is no user"
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    note = f"as {entry.pw_name} (uid {owner}), not root: {reason}"
    return (owner, entry.pw_gid, groups), note, None


#: Besides ``PYTHON*``, what a lookup run as another user keeps of its environment (what
#: decides imports, or lets the interpreter start); the rest is root's (a token in
#: ``.bashrc``) or the server's secrets (module docstring).
_IMPORT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH", "VIRTUAL_ENV")


def lookup_env(env, ids):
    """``env`` for the lookup: all of it run as we are (``ids`` None), else `_IMPORT_ENV`'s."""
    if ids is None:
        return env
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in _IMPORT_ENV}


def switcher(ids, cwd=None):
    """A ``preexec_fn`` that becomes ``ids`` (uid, gid, groups) for good, then enters
    ``cwd`` as that user, or None. Entered as root before the switch (``subprocess``'s own
    ``cwd``), a cwd under a directory only root may enter (``/root/sglang``) gave their process
    the files there (tests/integration/test_interpreter_attacks.py)."""
    if ids is None:
        return None
    uid, gid, groups = ids

    def switch():
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        if cwd is not None:
            os.chdir(cwd)

    return switch
