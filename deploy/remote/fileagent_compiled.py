"""The compile record's lookup, ON THE HOST, inside the file helper: no process of its own.

A part of the file helper's program (`deploy.remote.fileagent`; `deploy.remote.hostprogram`
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

#: As `deploy.checks.compile._STATIC_SIZE`.
STATIC_SIZE = 1000000


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


def compiled(args, sha256):
    """``{"reused": true, "sha256": KEY}`` when a passed compile of ``path``'s bytes by
    ``python`` is recorded under ``cache`` for this very interpreter; else ``reused`` false."""
    try:
        key = _sha256_of(args["path"], sha256)
        with open(args["cache"] + "/" + key, "rb") as handle:
            record = handle.readline()
        if record.endswith(b"\n"):
            record = record[:-1]
        identity = interpreter_identity(args["python"])
        if identity and sorted(record.decode("ascii").split(" ")) == sorted(identity):
            return {"reused": True, "sha256": key}
    except Exception:
        pass
    return {"reused": False}
