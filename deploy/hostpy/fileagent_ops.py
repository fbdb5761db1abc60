"""The file helper's operations (`deploy.hostpy.fileagent` frames the requests); the rules, as
users read them, are `deploy.remote.hostfiles.FILES_RULE`.

Why fds (issue 14): a check by path and a change by path are two lookups, and another user who
can write in the directory can swap a symlink in between (a setuid mode landed on a root-owned
binary that way). Here every check and change of one operation use one fd, or names relative to
one directory fd, reached by `walk` (issue 32), never by the kernel resolving the whole path.
A write's order matters: ``fchown`` clears setuid/setgid and a capability, so ``fchmod`` and
the xattrs come after it.
"""

import binascii
import contextlib
import errno as errnomod
import os
import stat as statmod

try:  # the built-in module: no hashlib, no OpenSSL to load at the helper's start (issue 17)
    from _sha2 import sha256 as sha256  # Python 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as sha256  # up to 3.11
    except ImportError:
        from hashlib import sha256 as sha256

TEMP_SUFFIX = ".tmp"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
#: As the kernel's bound on symlinks in one lookup (ELOOP past it).
_MAX_LINKS = 40


class Refused(Exception):
    """An operation refused on purpose (unsafe directory, hard link, changed file...)."""


def temp_prefix(base):
    """How temp files for a target called ``base`` are named (`remove_temps` finds them)."""
    return "." + base + ".deploy-"


def _split(path):
    if not path.startswith("/"):
        raise Refused(path + " is not an absolute path")
    directory, _, base = path.rpartition("/")
    if not base or base in (".", ".."):
        raise Refused(path + " does not name a file")
    return directory or "/", base


def _stat_dict(st):
    return {
        name: getattr(st, "st_" + name) for name in ("mode", "uid", "gid", "size", "mtime", "nlink")
    }


def _xattrs(fd):
    """Every xattr of the open file, values base64 (ACLs and capabilities included)."""
    try:
        names = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in (errnomod.ENOTSUP, errnomod.ENOSYS):
            return {}
        raise
    encode = binascii.b2a_base64
    return {name: encode(os.getxattr(fd, name), newline=False).decode() for name in sorted(names)}


def _judge(fd, shown, last):
    """Refuse the directory open on ``fd`` when someone other than root or us could change
    what is in it; a root-owned sticky one passes above the ``last`` (as ``/tmp``)."""
    st = os.fstat(fd)
    if st.st_uid in (0, os.geteuid()):
        if not st.st_mode & 0o022:
            return
        if not last and st.st_uid == 0 and st.st_mode & statmod.S_ISVTX:
            return
    raise Refused(
        f"{shown} is writable by others (owner uid {st.st_uid}, mode "
        f"{statmod.S_IMODE(st.st_mode):04o}): refused, as OpenSSH's StrictModes "
        "would; set unsafe_dir: true on the step to write there anyway"
    )


def walk(directory, judge=True, unsafe_dir=False):
    """An fd on ``directory`` (absolute), walked as `FILES_RULE` says (``unsafe_dir`` allows a
    directory others may write, never a symlink of theirs), each directory judged (`_judge`)
    when ``judge``. Raises `Refused`, or the OSError of a missing or non-directory component."""
    check = judge and not unsafe_dir
    parts = [part for part in directory.split("/") if part]
    parts.reverse()  # a stack: the next component last
    stack = [os.open("/", _WALK_FLAGS)]
    shown = ["/"]
    links = 0
    try:
        if check:
            _judge(stack[0], "/", not parts)
        while parts:
            part = parts.pop()
            if part == ".":
                continue
            if part == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                    shown.pop()
                continue
            here = shown[-1].rstrip("/") + "/" + part
            try:
                fd = os.open(part, _WALK_FLAGS, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno not in (errnomod.ELOOP, errnomod.ENOTDIR):
                    raise
                st = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                if not statmod.S_ISLNK(st.st_mode):
                    raise
                if st.st_uid not in (0, os.geteuid()):
                    raise Refused(
                        f"{here} is a symbolic link owned by uid {st.st_uid}: not followed "
                        "(only root's or ours are)"
                    ) from None
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errnomod.ELOOP, "too many symbolic links", directory) from None
                target = os.readlink(part, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                        shown.pop()
                parts.extend(reversed([p for p in target.split("/") if p]))
                continue
            stack.append(fd)
            shown.append(here)
            if check:
                _judge(fd, here, not parts)
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


@contextlib.contextmanager
def directory_of(path, judge=True, unsafe_dir=False):
    """``(fd, base)``: ``path``'s directory, open as `walk` opens it, and its last component;
    the fd is closed after."""
    directory, base = _split(path)
    dfd = walk(directory, judge, unsafe_dir)
    try:
        yield dfd, base
    finally:
        os.close(dfd)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_fd(fd, size_hint):
    chunks = []  # type: list[bytes]
    while True:
        chunk = os.read(fd, max(size_hint, 1 << 16))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read(args):
    """lstat and content of a path: (header, payload). Never through a symlink."""
    try:
        with directory_of(args["path"], judge=False) as (dfd, base):
            try:
                fd = os.open(base, _READ_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno != errnomod.ELOOP:
                    raise
                st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
                return {"stat": _stat_dict(st)}, b""  # a symlink: its own status, no content
            try:
                st = os.fstat(fd)
                if not statmod.S_ISREG(st.st_mode):
                    return {"stat": _stat_dict(st)}, b""
                data = _read_fd(fd, st.st_size)
                st = os.fstat(fd)
                return {"stat": _stat_dict(st), "xattrs": _xattrs(fd), "content": True}, data
            finally:
                os.close(fd)
    except FileNotFoundError:  # the directory or the file (or it went meanwhile)
        return {"missing": True}, b""


def _current(dfd, base, path, args):
    """The target's metadata through an fd; None when it does not exist."""
    try:
        fd = os.open(base, _READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errnomod.ELOOP:
            raise Refused(path + " is a symlink; not replaced") from None
        raise
    try:
        st = os.fstat(fd)
        if not statmod.S_ISREG(st.st_mode):
            raise Refused(path + " is not a regular file; not replaced")
        if st.st_nlink > 1 and args.get("hardlinks") != "allow":
            raise Refused(
                f"{path} has {st.st_nlink} hard links: replacing it would split them; refused "
                "(set hardlinks: allow on the step to replace this name only)"
            )
        expect = args.get("expect_sha256")
        if expect and sha256(_read_fd(fd, st.st_size)).hexdigest() != expect:
            raise Refused(path + " changed on the host while we were editing it; not written")
        return {"mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid, "xattrs": _xattrs(fd)}
    finally:
        os.close(fd)


#: The access ACL a new file takes from its directory's default ACL (issue 32).
ACL_ACCESS = "system.posix_acl_access"


def _apply_meta(fd, path, meta, exact):
    """fchown, then fchmod, then the xattrs (module docstring says why). ``exact`` (a file
    replaced, or metadata recorded for it): exactly ``meta``'s ACL (`FILES_RULE`), the
    directory's default one removed before the fchmod (with an ACL a chmod's group bits set
    only its mask); else (a new file) what any new file in that directory gets."""
    st = os.fstat(fd)
    uid = st.st_uid if meta.get("uid") is None else int(meta["uid"])
    gid = st.st_gid if meta.get("gid") is None else int(meta["gid"])
    if (uid, gid) != (st.st_uid, st.st_gid):
        os.fchown(fd, uid, gid)
    xattrs = meta.get("xattrs") or {}
    if exact and ACL_ACCESS not in xattrs:
        try:
            os.removexattr(fd, ACL_ACCESS)
        except OSError as exc:
            if exc.errno not in (errnomod.ENODATA, errnomod.ENOTSUP, errnomod.ENOSYS):
                raise
    os.fchmod(fd, statmod.S_IMODE(int(meta.get("mode", 0o600))))
    for name in sorted(xattrs):
        try:
            os.setxattr(fd, name, binascii.a2b_base64(xattrs[name]))
        except OSError as exc:
            raise Refused(
                f"cannot keep {name} on {path}: {exc.strerror or exc}; nothing was changed"
            ) from exc


def _spliced(spec, middle):
    """The bytes to write when the client sent only what differs from a file the host has:
    ``spec``'s head and tail of that file around ``middle``, each side checked by sha256 (the
    file must still be what the client knew; the result what it meant)."""
    source = spec["path"]
    try:
        answer, known = read({"path": source})
    except OSError as exc:  # named here: the request's own path may be another (a saved copy)
        raise Refused(
            f"{source} could not be read ({exc.strerror or exc}) to put the new bytes "
            "together; not written"
        ) from None
    if not answer.get("content") or sha256(known).hexdigest() != spec["sha256"]:
        raise Refused(source + " changed on the host while we were editing it; not written")
    view = memoryview(known)  # no copies of the ends: the file and the result, nothing else
    data = b"".join((view[: spec["head"]], middle, view[len(known) - spec["tail"] :]))
    if sha256(data).hexdigest() != spec["result"]:
        raise Refused("the bytes put together from " + source + " are not the ones meant")
    return data


def write(args, data):
    """Replace ``path`` with ``data`` atomically, keeping (or setting) its metadata."""
    path = args["path"]
    with directory_of(path, unsafe_dir=bool(args.get("unsafe_dir"))) as (dfd, base):
        current = _current(dfd, base, path, args)
        if current is None and args.get("expect_sha256"):
            raise Refused(path + " disappeared on the host while we were editing it; not written")
        if args.get("splice"):
            data = _spliced(args["splice"], data)
        meta = args.get("meta")
        explicit = meta is not None
        if meta is None:
            meta = current or {"mode": 0o600}
        elif meta.get("xattrs") is None and current:
            meta = dict(meta, xattrs=current["xattrs"])  # a record from before xattrs were kept
        tmp = temp_prefix(base) + os.urandom(4).hex() + TEMP_SUFFIX
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        try:
            write_all(fd, data)
            _apply_meta(fd, path, meta, current is not None or explicit)
            os.fsync(fd)
            st = os.fstat(fd)
            if st.st_size != len(data):
                raise OSError(errnomod.EIO, f"wrote {st.st_size} of {len(data)} bytes")
            os.rename(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):  # renamed already: a failed answer means "not written"
            os.fsync(dfd)
        return {}


_APPENDS = {}  # type: dict[str, int]


def append(args, data):
    """Append to a file kept open for the run (a journal); fsync when ``durable``."""
    path = args["path"]
    fd = _APPENDS.get(path)
    if fd is None:
        with directory_of(path) as (dfd, base):
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(base, flags, 0o600, dir_fd=dfd)
            os.fsync(dfd)  # the new name is durable with the file's first fsync
        _APPENDS[path] = fd
    write_all(fd, data)
    if args.get("durable"):
        os.fsync(fd)
    return {}


def mkdir(args, data):
    """Create one directory level; an existing directory (not a symlink to one) is fine."""
    with directory_of(args["path"]) as (dfd, base):
        try:
            os.mkdir(base, int(args.get("mode", 0o700)), dir_fd=dfd)
        except FileExistsError:
            st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
            if not statmod.S_ISDIR(st.st_mode):
                raise Refused(args["path"] + " exists and is not a directory") from None
    return {}


def remove(args, data):
    """Unlink a name that is not a directory (a symlink itself, never its target)."""
    try:
        with directory_of(args["path"], judge=False) as (dfd, base):
            os.unlink(base, dir_fd=dfd)
    except FileNotFoundError:  # the directory or the name
        return {"missing": True}
    return {}


def remove_temps(args, data):
    """Remove what an interrupted write of ``path`` left beside it; return the names."""
    removed = []
    with directory_of(args["path"], judge=False) as (dfd, base):
        for name in sorted(os.listdir(dfd)):
            if name.startswith(temp_prefix(base)) and name.endswith(TEMP_SUFFIX):
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if statmod.S_ISREG(st.st_mode):
                    os.unlink(name, dir_fd=dfd)
                    removed.append(name)
    return {"removed": removed}
