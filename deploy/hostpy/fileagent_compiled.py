"""The compile record's lookup, ON THE HOST, inside the file helper: no process of its own.

A part of the file helper's program (`deploy.hostpy.fileagent`; `deploy.remote.hostprogram`
inlines it): standard library only, no syntax newer than Python 3.8, no annotations, and no
module its start-up would not load anyway.

`deploy.checks.compile`'s cached check is a shell script; sent ahead with the lock it only
looks its record up (it never compiles there). As a command of the lock's shell that lookup
cost the host ~10 processes per run — the loop's own (head, a subshell, timeout, a shell, wc,
cat) and the script's (sha256sum, readlink, head, stat) — in a change run, where it always
misses, and in a re-run, where it is all the run checks (issue 17). Here the helper the run
has started anyway answers it from the same facts, by the same rule:

- the key is the sha256 of the file's bytes now (``sha256sum < FILE``);
- the interpreter (an absolute path; anything else is left to the shell check) resolved
  through symlinks must be an ELF binary; its identity is ``stat -L``'s
  ``size:device:inode:mtime:ctime`` of it and of every ``libpython*.so*`` the script's globs
  find (`deploy.checks.compile._LIBPYTHON`), and a binary with no libpython must be large
  enough to hold the interpreter;
- the record ``CACHE/<key>`` must hold exactly those identities. The script compares its own
  listing as text; the order of a glob's names follows the shell's locale, so here the two
  lists are compared sorted. Either way every file the record names must be the same file,
  unchanged.

Anything that goes wrong is a miss (``reused`` false): the run then runs the shell check,
which compiles and records. A miss never fails the request, so nothing sent after it is
skipped.
"""

import os
import stat as statmod

#: As `deploy.checks.compile`: `_STATIC_SIZE`, `CACHED`, `CACHE_KEEP`, `CACHE_DAYS`
#: (tests/unit/test_compile_lookup.py holds them equal).
STATIC_SIZE = 1000000
MARKER = "deploy-compile: reused"
KEEP = 64
DAYS = 30


def _libpython_names(directory):
    """``directory/libpython*.so*`` as a glob lists it (names only; none if unreadable)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [
        directory + "/" + name
        for name in names
        if name.startswith("libpython") and ".so" in name[len("libpython") :]
    ]


def _candidates(binary):
    """The paths `deploy.checks.compile._LIBPYTHON` expands to for ``binary``."""
    here = binary.rpartition("/")[0]
    found = _libpython_names(here + "/../lib") + _libpython_names(here + "/../lib64")
    found += _libpython_names("/usr/lib") + _libpython_names("/usr/lib64")
    try:
        arches = os.listdir("/usr/lib")
    except OSError:
        arches = []
    for name in arches:
        if name.endswith("-linux-gnu") and not name.startswith("."):
            found += _libpython_names("/usr/lib/" + name)
    return found


def _identity(st):
    seconds = 1000000000
    return f"{st.st_size}:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns // seconds}:{st.st_ctime_ns // seconds}"


def interpreter_identity(python):
    """The identities the shell check records for ``python`` (a list), or None."""
    if not python.startswith("/"):
        return None
    binary = os.path.realpath(python)
    with open(binary, "rb") as handle:
        if handle.read(4)[1:] != b"ELF":
            return None
    files = [binary] + [path for path in _candidates(binary) if os.path.isfile(path)]
    stats = [os.stat(path) for path in files]
    if len(files) == 1 and stats[0].st_size <= STATIC_SIZE:
        return None
    return [_identity(st) for st in stats]


def _sha256_of(path, sha256):
    digest = sha256()
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(1 << 20)
            if not chunk:
                return digest.hexdigest()
            digest.update(chunk)


def _recorded(key, cache, identity):
    try:
        with open(cache + "/" + key, "rb") as handle:
            record = handle.readline()
    except OSError:
        return False
    if record.endswith(b"\n"):
        record = record[:-1]
    try:
        return bool(identity) and sorted(record.decode("ascii").split(" ")) == sorted(identity)
    except ValueError:
        return False


def is_this_interpreter(python):
    """Whether ``python`` (an absolute path) is the very binary this process runs."""
    try:
        if not python.startswith("/"):
            return False
        mine = os.stat("/proc/self/exe")
        theirs = os.stat(os.path.realpath(python))
        return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
    except OSError:
        return False


def compiled(args, sha256):
    """``{"reused": true, "sha256": KEY}`` when a passed compile of ``path``'s bytes by
    ``python`` is recorded under ``cache`` for this very interpreter; else ``reused`` false.
    ``here``: whether ``python`` is this helper's own binary (`compile_here` may then run the
    check itself)."""
    here = is_this_interpreter(args.get("python") or "")
    try:
        key = _sha256_of(args["path"], sha256)
        if _recorded(key, args["cache"], interpreter_identity(args["python"])):
            return {"reused": True, "sha256": key, "here": here}
    except Exception:
        pass
    return {"reused": False, "here": here}


def compile_here(args, sha256):
    """The cached compile check of `deploy.checks.compile` (``_CACHING_SCRIPT``), run in this
    process: only for an interpreter that `is_this_interpreter` (else refused, and the client
    never asks). ``compile()`` under ``-I -S`` is a pure function of the source and the
    interpreter binary (`deploy.checks.compile`), and this process is that binary, started
    with those flags: the answer is the one a new process of it would give, without its
    start-up (~10 ms of the host's CPU) or the command's processes around it. The answer is
    the command's: ``status``, ``stdout``, ``stderr``."""
    python, path, cache = args["python"], args["path"], args["cache"]
    if not is_this_interpreter(python):
        raise ValueError(python + " is not the helper's interpreter")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, ValueError) as exc:
        return {"status": 1, "stdout": "", "stderr": _problem(exc)}
    key = sha256(data).hexdigest()
    identity = interpreter_identity(python)
    if identity and _recorded(key, cache, identity):
        return {"status": 0, "stdout": MARKER + " " + key + "\n", "stderr": ""}
    warnings, problem = _compiled_source(data, path)
    if problem:
        return {"status": 1, "stdout": "", "stderr": warnings + problem}
    if identity:
        _record(cache, key, identity)
    return {"status": 0, "stdout": key + "\n", "stderr": warnings}


def _compiled_source(data, path):
    """``compile()`` of ``data``: (the warnings it printed, the error or ""). Its warnings
    (a SyntaxWarning is shown by default) go to ``sys.stderr``: here that is the lock's own
    stderr, which nobody reads — bytes left there keep the client's channel readable, so its
    waits would spin — so they are kept for the answer, where the command's stderr had them."""
    import io
    import sys

    saved, sys.stderr = sys.stderr, io.StringIO()
    try:
        try:
            compile(data, path, "exec", dont_inherit=True)
        except Exception as exc:  # SyntaxError, ValueError; a recursion or memory limit too
            return sys.stderr.getvalue(), _problem(exc)
        return sys.stderr.getvalue(), ""
    finally:
        sys.stderr = saved


def _problem(exc):
    return type(exc).__name__ + ": " + str(exc) + "\n"


def _record(cache, key, identity):
    """As the script records a pass (best effort, silent): the record, old ones pruned."""
    import time

    try:
        if not os.path.isdir(cache):
            os.makedirs(cache, 0o700)
            os.chmod(cache, 0o700)
        with open(cache + "/" + key, "w") as handle:
            handle.write(" ".join(identity) + "\n")
        names = os.listdir(cache)
        if len(names) > KEEP:
            old = time.time() - (DAYS + 1) * 86400
            for name in names:
                st = os.lstat(cache + "/" + name)
                if statmod.S_ISREG(st.st_mode) and st.st_mtime < old:
                    os.unlink(cache + "/" + name)
    except Exception:
        pass
