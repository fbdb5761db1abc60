"""Make the host's own interpreter compile a file, and turn its answer into one line.

The edit already checked the file with the local ``ast``, but the host may run another Python
version (a newer grammar, an older one): the check that counts is the one made by the
interpreter that will import the file. The command only compiles, in memory: unlike
``python -m py_compile`` it writes no ``.pyc`` next to the file (nor anywhere), so checking
leaves the host exactly as it was. Running it is the remote layer's job; nothing here performs
I/O.

Compiling costs the host ~15 ms of CPU (the interpreter's start-up, then compile()), and a
no-change re-run has nothing else left to pay for: at 20 hosts that was a quarter of the
hosts' CPU and the whole gap to the bare connect-and-``true`` floor. So a passed check is
remembered on the host, under ``state_dir/compiled/``, keyed like a ``.pyc`` is validated: by
what determines the answer. ``compile()`` under ``-I -S`` is a pure function of the source
bytes and the interpreter binary, so the key is the file's sha256 (hashed on the host at
check time, by the interpreter itself when it compiles) and the identity of the resolved
interpreter binary and of the ``libpython`` it may be linked against (size, device, inode,
mtime and ctime after following symlinks: replacing or upgrading either changes them). The
result is reused only when both match, and only when the interpreter is an ELF binary, not a
wrapper script (a pyenv shim or ``#!/bin/sh`` wrapper can start a different interpreter
without changing itself), that holds the interpreter or has a libpython where one is
installed. Failures are never remembered.
``compile_cache: false`` on the step turns this off.
"""

from __future__ import annotations

from deploy import hostsh
from deploy.checks.interpreter import REFUSED

#: Runs under any Python 3 (no f-strings): print one line on failure, exit 1.
_SCRIPT = """import sys
p = sys.argv[1]
try:
    with open(p, "rb") as f:
        compile(f.read(), p, "exec", dont_inherit=True)
except (SyntaxError, ValueError, OSError) as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
"""

#: Runs under any Python 3: compile the bytes on stdin (``--check``: the planned content).
_STDIN_SCRIPT = (
    'import sys; compile(sys.stdin.buffer.read(), sys.argv[1], "exec", dont_inherit=True)'
)

#: ``-B`` no bytecode written, ``-I`` isolated from the caller's environment and user site,
#: ``-S`` no ``site`` at all: compile() needs nothing from site-packages, and processing its
#: ``.pth`` files is most of a venv interpreter's start-up (~20 ms of the ~25 here).
_FLAGS = ("-B", "-I", "-S")

#: Printed by `compile_command` with a cache when it reused a passed check, followed by the
#: file's sha256; a check that compiled prints the sha256 of what it compiled instead.
CACHED = "deploy-compile: reused"

#: Set (to any value) by the lock for the commands it sends ahead (`deploy.remote.lock`): the
#: cached check then answers from its record only, and on a miss exits `AHEAD_STATUS` saying
#: `NOT_RECORDED` instead of compiling. A check sent ahead is wasted whenever the run changes
#: the file first — a change run's — and compiling for nothing delayed the lock's answer by
#: the interpreter's start-up and took the host's CPU. The step runs the real check when the
#: answer is not a pass for its bytes, so a miss costs a round trip only to a run that
#: changes nothing and finds no record (state_dir emptied). A real check never reads it as
#: a pass: set by mistake, it makes the check fail, saying why.
AHEAD_VARIABLE = "DEPLOY_SENT_AHEAD"
AHEAD_STATUS = 3
NOT_RECORDED = "deploy-compile: not recorded (a check sent ahead compiles nothing)"

#: When more than `CACHE_KEEP` checks are recorded, those older than `CACHE_DAYS` days are
#: removed as a new one is recorded (one record is ~300 bytes; a host sees few versions).
CACHE_KEEP = 64
CACHE_DAYS = 30

#: The cached form's check, in the interpreter being checked (any Python 3.3+, no f-strings):
#: ``argv`` is the file, the cache directory and the interpreter as the shell found it. The
#: key is the sha256 of the bytes read (the built-in ``_sha2``/``_sha256`` module spares
#: importing hashlib and OpenSSL, ~2 ms); ``ident`` is the interpreter's identity, by the rule
#: of the module docstring: ``stat -L``'s ``size:device:inode:mtime:ctime`` of the resolved
#: binary (an ELF file) and of each ``libpython*.so*`` that `_LIBPYTHON`'s globs find, listed
#: in their order, names sorted; None (compile, record nothing) unless the binary has a
#: libpython or is larger than `_STATIC_SIZE`. A record (``CACHE/KEY``, written by this script
#: or by the shell form before it) is the identity it passed with; it is compared as a sorted
#: list: a shell's glob listed names in its locale's order. A reused pass prints `CACHED` and
#: the key; a compile that passes prints the key, then records it. Recording is best effort
#: and silent, and never makes a failed compile pass.
_CACHING_SCRIPT = """import os, stat, sys, time
p, c, i = sys.argv[1], sys.argv[2], sys.argv[3]
def libs(d):
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    return [d + "/" + n for n in names if n.startswith("libpython") and ".so" in n[9:]]
def ident(i):
    try:
        if not i.startswith("/"):
            return None
        b = os.path.realpath(i)
        with open(b, "rb") as f:
            if f.read(4)[1:] != b"ELF":
                return None
        h = b.rpartition("/")[0]
        found = libs(h + "/../lib") + libs(h + "/../lib64") + libs("/usr/lib") + libs("/usr/lib64")
        for a in sorted(os.listdir("/usr/lib")):
            if a.endswith("-linux-gnu") and not a.startswith("."):
                found += libs("/usr/lib/" + a)
        files = [b] + [x for x in found if os.path.isfile(x)]
        sts = [os.stat(x) for x in files]
        if len(files) == 1 and sts[0].st_size <= STATIC:
            return None
        n = 1000000000
        return ["%d:%d:%d:%d:%d" % (s.st_size, s.st_dev, s.st_ino, s.st_mtime_ns // n,
                                    s.st_ctime_ns // n) for s in sts]
    except Exception:
        return None
try:
    with open(p, "rb") as f:
        data = f.read()
except (ValueError, OSError) as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
try:
    try:
        from _sha2 import sha256
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:
            from hashlib import sha256
    k = sha256(data).hexdigest()
except Exception:
    k = None
f = ident(i) if k else None
if f:
    try:
        with open(c + "/" + k, "rb") as rf:
            r = rf.readline()
        if r.endswith(b"\\n"):
            r = r[:-1]
        if sorted(r.decode("ascii").split(" ")) == sorted(f):
            print("MARKER " + k)
            sys.exit(0)
    except (OSError, ValueError):
        pass
try:
    compile(data, p, "exec", dont_inherit=True)
except (SyntaxError, ValueError) as e:
    sys.exit("%s: %s" % (type(e).__name__, e))
if k:
    print(k)
    sys.stdout.flush()
if k and f:
    try:
        if not os.path.isdir(c):
            os.makedirs(c, 0o700)
            os.chmod(c, 0o700)
        with open(c + "/" + k, "w") as rf:
            rf.write(" ".join(f) + "\\n")
        names = os.listdir(c)
        if len(names) > KEEP:
            old = time.time() - (DAYS + 1) * 86400
            for name in names:
                st = os.lstat(c + "/" + name)
                if stat.S_ISREG(st.st_mode) and st.st_mtime < old:
                    os.unlink(c + "/" + name)
    except Exception:
        pass
"""

#: Where a dynamically linked interpreter's ``libpython`` lives (prefix/lib for source and
#: pyenv builds, the distribution's directories for RHEL-style builds): the compiler is in it.
_LIBPYTHON = (
    '"${i%/*}"/../lib/libpython*.so* "${i%/*}"/../lib64/libpython*.so* '
    "/usr/lib/libpython*.so* /usr/lib64/libpython*.so* /usr/lib/*-linux-gnu/libpython*.so*"
)

#: A binary this large holds the interpreter itself (a static build is ~4-7 MB; one linked
#: against libpython ~20 kB).
_STATIC_SIZE = 1_000_000

#: The shell around the interpreter is ``deploy/hostsh/compile.sh`` (no cache) and
#: ``compile_cached.sh`` (with one), whose literals are this module's constants
#: (tests/unit/test_shellcheck.py holds them to it).

#: The whole environment of an interpreter run as its owner (``deploy/hostsh/owner.sh``):
#: ``env -i`` keeps root's (``HF_TOKEN``, cloud keys in ``.bashrc``) from a process that user
#: controls; ``-I`` makes Python ignore the rest anyway. Where ``setpriv``/``runuser`` are found.
_OWNER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


def compile_command(python: str, path: str, *, cache: str | None = None) -> str:
    """A shell command that compiles ``path`` with ``python`` and writes nothing beside it.

    ``python`` is one executable (a name on PATH or a path), not a command line; see `_FLAGS`
    for how it is started. Exit status 0 means the file compiles;
    otherwise stderr's last line is ``SyntaxError: MESSAGE (FILE, line N)`` (or the
    ``ValueError``/``OSError`` that stopped it); see `compile_problem`.

    With ``cache`` (a directory on the host, e.g. ``state_dir/compiled``) a passed check is
    recorded there and reused while the file's bytes and the interpreter binary are the same
    (module docstring); a reused result prints `CACHED` on stdout (see `was_reused`).
    """
    if cache is None:
        return _uncached(python, path, path)
    script = (
        _CACHING_SCRIPT.replace("MARKER", CACHED)
        .replace("STATIC", str(_STATIC_SIZE))
        .replace("KEEP", str(CACHE_KEEP))
        .replace("DAYS", str(CACHE_DAYS))
    )
    return hostsh.program(
        "compile_cached.sh",
        {"c": cache, "p": path, "_tY": python, "_tC": script, "_tO": _STDIN_SCRIPT},
    )


def _uncached(python: str, path: str, source: str) -> str:
    """``deploy/hostsh/compile.sh``: compile ``path`` (``source``, the file an untrusted
    interpreter's bytes are opened from; "" for stdin) with ``python``, as ``deploy/hostsh/guard.sh`` says."""
    code = _SCRIPT if source else _STDIN_SCRIPT
    values = {"_tY": python, "_tD": path, "_tF": source, "_tC": code, "_tO": _STDIN_SCRIPT}
    return hostsh.program("compile.sh", values)


def was_reused(stdout: str) -> bool:
    """Whether a cached `compile_command` answered from an earlier passed check."""
    return stdout.strip().rpartition(" ")[0] == CACHED


def compiled_sha256(stdout: str) -> str | None:
    """The sha256 of the bytes a passed cached `compile_command` is about (reused or not).

    Lets a check run ahead of time — with the lock's own round trip, before the run changed
    anything — count only for a file that still holds exactly those bytes.
    """
    last = stdout.strip().rpartition(" ")[2]
    if len(last) == 64 and all(c in "0123456789abcdef" for c in last):
        return last
    return None


def compile_stdin_command(python: str, path: str) -> str:
    """Like `compile_command`, for content sent on stdin (``path`` names it in messages)."""
    return _uncached(python, path, "")


def compile_problem(exit_status: int, stderr: str, *, python: str | None = None) -> str | None:
    """One line describing why the compile command failed, or None when it succeeded.

    Args:
        exit_status: the command's exit status (127: the shell did not find the interpreter).
        stderr: its standard error; only the last non-empty line is used.
        python: the interpreter, named in the message when given.
    """
    if exit_status == 0:
        return None
    name = f" {python}" if python else ""
    if exit_status == EXIT_NOT_FOUND:
        return f"interpreter not found{':' + name if name else ''}"
    if exit_status == EXIT_NOT_EXECUTABLE:
        return f"interpreter cannot be executed (permission denied?){':' + name if name else ''}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if exit_status == REFUSED and lines and lines[-1].startswith("deploy: refusing to run"):
        return lines[-1].removeprefix("deploy: ")  # `deploy.checks.interpreter.RUN_AS`
    reason = lines[-1] if lines else f"exit status {exit_status}, no output"
    return f"does not compile{' with' + name if name else ''}: {reason}"
