"""Whether state_dir can be trusted: the lock's own exec judges it first, before it reads or
writes anything there (`deploy.remote.lock`). ``deploy/hostsh/trust.sh`` is that shell
program, `TRUST_RULE` the rule it enforces in the words docs/operations.md shows.
"""

#: How state_dir is trusted (docs/operations.md shows this text).
TRUST_RULE = """state_dir is checked by the lock's own exec, before anything in it is read or
written, at no extra round trip: it and every parent directory, as written and as resolved
through symlinks, must be owned by root or the login user and must not be writable by group or
others — what OpenSSH's StrictModes asks of ``~/.ssh``. A root-owned sticky parent such as
``/tmp`` passes (nobody else can rename or remove what we own in it); state_dir itself never
does. ``lock`` and ``runs`` inside it must not be symbolic links, so a planted link is never
written through, and a run whose directory or journal is a symbolic link is not read. Otherwise the host is not attempted (exit 4) with ``state_dir untrusted``,
the path and its owner, and nothing in it — a planted "unfinished run" included — is read or
acted on. Nothing is judged before it exists: missing parts are created by the check's shell
(mode 0700, one level at a time, never ``mkdir -p`` through what another user put there), and
when state_dir itself was not there to judge, the whole path is judged again once created — a
directory another user renamed into its place in between (possible under a sticky ``/tmp``) is
refused as theirs. A name with spaces, shell metacharacters or line breaks is judged as any
other: each line ``stat`` prints is paired with the path it was asked for, never parsed for
a name.
"""
