"""Starts the file helper ON THE HOST from its compiled code, kept in state_dir between runs.

The lock's shell starts the file helper (`deploy.remote.fileagent`) once per run as
``PYTHON -I -S -c BOOT SOURCE 3 4 STATE_DIR`` (`deploy.remote.loop.LOOP`), PYTHON being the
interpreter the run's compile check names when there is one and the lock found it trusted
(`deploy.checks.interpreter`: no other user can change it) (the helper can then compile in
place of a process of it: `deploy.remote.fileagent_compiled.compile_here`), else python3. Compiling
the helper's ~26 kB of source was the largest part of its start-up: ~9 ms of the host's CPU
per run in a fresh interpreter, against ~3 ms to load the same code with ``marshal`` (issue
17; measured with Python 3.11). So this program runs the code compiled by an earlier run when
it is there, and otherwise compiles the source it was given and keeps the code for the next.

What is kept: ``STATE_DIR/.helper-code.KEY``, where KEY is the sha256 of the interpreter's
bytecode magic number, its ``sys.version`` and the source: another source or another
interpreter build never finds this file. Its content is the sha256 of the marshalled code,
then that code: a torn or damaged file is compiled afresh, never loaded. It is written as
every file in state_dir is (an ``O_EXCL`` temp file, then a rename), opened without following
symlinks, and state_dir itself passed the lock's trust check before this runs: only root and
the login user can write there, the same who can change what the helper does anyway. Files
of other helper versions are removed when one is written. Anything that fails here costs only
the cache: the source is compiled as before.

What is loaded to run is judged by fd, never by path (issue 32): state_dir is opened once
(``O_DIRECTORY``) and ``fstat``-ed — owned by root or us and writable by nobody else, or the
cache is neither read nor written — and the kept file is opened relative to that fd with
``O_NOFOLLOW`` and used only if that fd is a regular file we own, with one link, that nobody
else may write.

Standard library only, no syntax newer than Python 3.8, no annotations; ``sys.argv`` is given
to the helper as if it had been started with ``-c SOURCE 3 4``.
"""

import marshal
import os
import sys

PREFIX = ".helper-code."
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _sha256():
    try:
        from _sha2 import sha256  # Python 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:
            from hashlib import sha256
    return sha256


def _trusted(st, regular):
    """Whether an fstat says: ours (or root's, for a directory), no one else may write it."""
    owners = (os.geteuid(),) if regular else (0, os.geteuid())
    if st.st_uid not in owners or st.st_mode & 0o022:
        return False
    if regular:
        return (st.st_mode & 0o170000) == 0o100000 and st.st_nlink == 1
    return True


def _read(dfd, name):
    fd = os.open(name, _OPEN, dir_fd=dfd)
    try:
        if not _trusted(os.fstat(fd), True):
            raise ValueError(name + " is not ours alone")
        chunks = []  # type: list[bytes]
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _keep(dfd, name, code, sha256):
    """Keep ``code`` as ``name`` for the next run; whether that worked."""
    try:
        _write(dfd, name, marshal.dumps(code), sha256)
    except (OSError, ValueError):
        return False
    return True


def _write(dfd, name, body, sha256):
    """Write ``name`` (digest + body) atomically in ``dfd``; remove other versions' files."""
    temp = name + ".tmp" + str(os.getpid())
    fd = os.open(temp, _CREATE, 0o600, dir_fd=dfd)
    try:
        try:
            data = sha256(body).digest() + body
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        os.unlink(temp, dir_fd=dfd)  # a full disk, a directory in the way: no temp left
        raise
    for other in os.listdir(dfd):
        if other.startswith(PREFIX) and other != name:
            os.unlink(other, dir_fd=dfd)


def code_for(source, state_dir):
    """The helper's code object: loaded from state_dir when kept there, else compiled (and
    kept)."""
    sha256 = _sha256()
    magic = getattr(sys.modules.get("_frozen_importlib_external"), "MAGIC_NUMBER", b"")
    key = sha256(magic + sys.version.encode("utf-8", "replace") + source.encode("utf-8"))
    name = PREFIX + key.hexdigest()
    try:
        dfd = os.open(state_dir, _DIR)
    except OSError:
        dfd = -1
    try:
        if dfd >= 0 and not _trusted(os.fstat(dfd), False):
            os.close(dfd)
            dfd = -1
        if dfd >= 0:
            try:
                data = _read(dfd, name)
                if len(data) > 32 and sha256(data[32:]).digest() == data[:32]:
                    return marshal.loads(data[32:])
            except (OSError, ValueError, EOFError, TypeError):
                pass
        code = compile(source, "<deploy file helper>", "exec", dont_inherit=True)
        if dfd >= 0:
            _keep(dfd, name, code, sha256)
        return code
    finally:
        if dfd >= 0:
            os.close(dfd)


#: Exit status when this interpreter cannot run the helper (too old, or its source does not
#: compile here): the lock's shell then starts it with python3 instead (`deploy.remote.session`).
#: Python itself exits 2 on an option it does not know and 1 on a syntax error in this program.
CANNOT = 2
#: Exit status when the helper, once started, ended with an error: never 1 or 2, so that the
#: shell never mistakes it for a start that failed and starts a second helper.
FAILED = 70


def main():
    source, state_dir = sys.argv[1], sys.argv[-1]
    if sys.version_info < (3, 8):  # noqa: UP036  # the host's interpreter, not ours
        sys.exit(CANNOT)
    try:
        code = code_for(source, state_dir)
    except Exception:
        sys.exit(CANNOT)
    sys.argv = ["-c", *sys.argv[2:-1]]
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(FAILED)


if __name__ == "__main__":
    main()
