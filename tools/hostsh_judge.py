"""``python -m tools.hostsh_judge``: write ``deploy/hostsh/judge.sh`` from the trust rule's table.

`deploy.hostpy.trust_rule.RULE` is the rule written once; the process agent runs it in
Python (`deploy.hostpy.trust_rule.verdict`) and the host's shell runs this rendering of it
(issue 32: 2). tests/unit/test_trust_rule.py fails when the file differs from `render`.
"""

from __future__ import annotations

from deploy.hostpy.trust_rule import OTHER_OWNER, RULE, TRUSTED, WRITABLE
from deploy.hostsh import DIRECTORY

HEADER = """# shellcheck shell=sh
# GENERATED from deploy.hostpy.trust_rule.RULE by `python -m tools.hostsh_judge`: edit the
# table there, not this file (tests/unit/test_trust_rule.py holds the two to the same cases).
# Part of the interpreter trust check (deploy.checks.interpreter; check.sh).
#
# _tj UID HEXMODE OWNER NAME: one `stat -c '%u %f %U %n'` line of those paths, judged
# against _tI (the login uid). Sets _tX (the first reason it fails: the first path writable
# by group or others, else the first owned by another user) and _tU/_tN: the one other user
# whose paths these are, whom a root caller may run the interpreter as (- when there is none
# to pick: two other owners, or a path anyone may write, which is then the reason given).
# Rows, in order (the first that holds decides; none: writable):
"""

_ACTION = {
    OTHER_OWNER: (
        '    [ -n "$_tX" ] || _tX="$4 is owned by $3 (uid $1)"\n'
        '    if [ -z "$_tU" ]; then _tU=$1; _tN=$3; elif [ "$_tU" != "$1" ]; then _tU=-; fi\n'
    ),
    TRUSTED: "    :\n",
    WRITABLE: (
        '    [ -n "$_tw" ] || _tX="$4 is writable by group or others'
        ' (mode $(printf %o $((0x$2 & 4095))), owner $3)"\n'
        "    _tU=-; _tw=1\n"
    ),
}


def render() -> str:
    """judge.sh's whole text: `HEADER`, one comment line per row, then ``_tj``."""
    rows = "".join(f"#   {n}. {row[0]}: {row[3]}\n" for n, row in enumerate(RULE, 1))
    body = "_tj() {\n"
    for n, (_, _, shell, verdict) in enumerate(RULE):
        body += f"  {'if' if n == 0 else 'elif'} {shell}; then\n" + _ACTION[verdict]
    body += "  else\n" + _ACTION[WRITABLE] + "  fi\n}\n"
    return HEADER + rows + "\n" + body


def main() -> None:
    (DIRECTORY / "judge.sh").write_text(render())


if __name__ == "__main__":
    main()
