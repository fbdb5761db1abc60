"""One trust rule, two renderings (issue 32: 2): `deploy.hostpy.trust_rule.RULE` is the rule;
the process agent judges by it in Python (`deploy.hostpy.agent_trust.judge_stats`) and the
host's shell by ``deploy/hostsh/judge.sh``, generated from the same table. Held here to the
same verdicts, reasons and owner picked, on the same owner/mode cases, in dash and bash."""

from __future__ import annotations

import stat
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deploy import hostsh
from deploy.hostpy import trust_rule
from deploy.hostpy.agent_trust import _name, judge_stats
from tools.hostsh_judge import render

UIDS = (0, 1000, 1001, 1002)
TYPES = (stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK, stat.S_IFIFO)

paths = st.lists(
    st.tuples(
        st.sampled_from(UIDS),
        st.sampled_from(TYPES),
        st.integers(min_value=0, max_value=0o7777),
    ),
    min_size=1,
    max_size=6,
)


def _shell(shell: str, stats: list[tuple[str, int, int]], me: int) -> tuple[str, str]:
    """``judge.sh``'s ``_tj`` over ``stats`` as ``stat -c '%u %f %U %n'`` gives them."""
    lines = "".join(f"_tj {uid} {mode:x} {_name(uid)} {path}\n" for path, uid, mode in stats)
    script = (
        hostsh.text("judge.sh")
        + f"_tX=; _tU=; _tN=; _tw=; _tI={me}\n"
        + lines
        + 'printf "%s\\n%s\\n" "$_tX" "$_tU"\n'
    )
    out = subprocess.run([shell, "-c", script], capture_output=True, text=True, check=True)
    reason, owner = out.stdout.split("\n")[:2]
    return reason, owner


def test_judge_sh_is_the_tables_rendering() -> None:
    """Edit the table, then ``python -m tools.hostsh_judge``: never the file by hand."""
    assert (hostsh.DIRECTORY / "judge.sh").read_text() == render()


@pytest.mark.parametrize("shell", ["/bin/dash", "/bin/bash"])
@settings(max_examples=120, deadline=None)
@given(cases=paths, me=st.sampled_from((0, 1000)))
def test_python_and_shell_judge_alike(
    shell: str, cases: list[tuple[int, int, int]], me: int
) -> None:
    stats = [(f"/p{n}", uid, kind | perm) for n, (uid, kind, perm) in enumerate(cases)]
    reason, owner = judge_stats(stats, me)
    assert _shell(shell, stats, me) == (
        reason or "",
        "" if owner is None else "-" if owner == -1 else str(owner),
    )


@pytest.mark.parametrize(
    ("uid", "mode", "me", "expected"),
    [
        (1001, stat.S_IFREG | 0o644, 0, trust_rule.OTHER_OWNER),
        (1000, stat.S_IFREG | 0o644, 1000, trust_rule.TRUSTED),
        (0, stat.S_IFLNK | 0o777, 0, trust_rule.TRUSTED),
        (0, stat.S_IFDIR | 0o1777, 0, trust_rule.TRUSTED),  # /tmp
        (0, stat.S_IFREG | 0o1777, 0, trust_rule.WRITABLE),  # sticky, but no directory
        (1000, stat.S_IFDIR | 0o1777, 1000, trust_rule.WRITABLE),  # sticky, but not root's
        (0, stat.S_IFDIR | 0o775, 0, trust_rule.WRITABLE),
    ],
)
def test_the_rule(uid: int, mode: int, me: int, expected: str) -> None:
    assert trust_rule.verdict(uid, mode, me) == expected
