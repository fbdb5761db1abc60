"""The trust rule for one path, written once: the table both renderings come from (issue 32: 2).

Every host-side interpreter start judges the paths it depends on by this rule: the server's
start and its module lookup in Python (`deploy.hostpy.agent_trust.judge`, in the process
agent), and in POSIX sh the compile check and the process agent's and load generator's
``agent_python`` (``deploy/hostsh/check.sh``, ``root_only.sh``). Those must be judged before
any Python of theirs starts, and judging in Python would take a Python process of its own (a
helper request first would cost the change run a round trip). The shell rendering,
``deploy/hostsh/judge.sh``, is generated from `RULE` (``python -m tools.hostsh_judge``;
tests/unit/test_trust_rule.py fails when it differs, and runs both on the same cases).

A row: (what it is, the Python test of ``(uid, mode, me)``, the shell test of ``"$1"`` the
uid, ``"$2"`` the mode in hex as ``stat -c %f`` prints it and ``$_tI`` the uid judged for,
the verdict), judged in order (`verdict`).
"""

#: Owned by a user other than root and the one judged for: that user could change it.
OTHER_OWNER = "other owner"
#: Nobody else can change it.
TRUSTED = "trusted"
#: Owned by root or the user judged for, yet writable by group or others.
WRITABLE = "writable"

_TYPE = 0o170000
_LINK = 0o120000
_DIR = 0o040000

RULE = (
    (
        "owned by another user",
        lambda uid, mode, me: uid not in (0, me),
        '[ "$1" != 0 ] && [ "$1" != "$_tI" ]',
        OTHER_OWNER,
    ),
    (
        "a symbolic link (judged by its owner; its target is judged as resolved)",
        lambda uid, mode, me: mode & _TYPE == _LINK,
        f"[ $((0x$2 & {_TYPE})) = {_LINK} ]",
        TRUSTED,
    ),
    (
        "not writable by group or others",
        lambda uid, mode, me: not mode & 0o022,
        f"[ $((0x$2 & {0o022})) = 0 ]",
        TRUSTED,
    ),
    (
        "a root-owned sticky directory (/tmp: nobody else can rename what is in it)",
        lambda uid, mode, me: bool(mode & 0o1000) and uid == 0 and mode & _TYPE == _DIR,
        f'[ $((0x$2 & {0o1000})) != 0 ] && [ "$1" = 0 ] && [ $((0x$2 & {_TYPE})) = {_DIR} ]',
        TRUSTED,
    ),
)


def verdict(uid, mode, me):
    """`OTHER_OWNER`, `TRUSTED` or `WRITABLE` for a path owned by ``uid`` with ``mode``
    (``st_mode``, not following a symbolic link), judged for the user ``me``."""
    return next((row[3] for row in RULE if row[1](uid, mode, me)), WRITABLE)
