"""deploy.edits.lineinfile: Ansible's lineinfile semantics, table-driven (file in, file out).

Each case is (source, spec, expected bytes or None for "no change"). Every changed result is
also applied a second time: a re-run must be no change (idempotence), the property Ansible's
own module misses for a last line without a newline (see the module docstring).
"""

from __future__ import annotations

import pytest

from deploy.edits.lineinfile import LineSpec, line_in_file
from deploy.errors import EditError

CASES: list[tuple[str, bytes, LineSpec, bytes | None]] = [
    # --- present, with a regexp
    (
        "regexp replaces the matching line",
        b"a=1\nport=80\nb=2\n",
        LineSpec(regexp=r"^port=", line="port=8080"),
        b"a=1\nport=8080\nb=2\n",
    ),
    (
        "regexp: only the last match is replaced (as Ansible)",
        b"port=1\nport=2\n",
        LineSpec(regexp=r"^port=", line="port=3"),
        b"port=1\nport=3\n",
    ),
    (
        "regexp matching the wanted line: no change",
        b"port=8080\n",
        LineSpec(regexp=r"^port=", line="port=8080"),
        None,
    ),
    (
        "regexp no match, line present elsewhere: no change",
        b"x\nport = 8080\n",
        LineSpec(regexp=r"^port=", line="port = 8080"),
        None,
    ),
    (
        "regexp no match: appended at the end",
        b"a\nb\n",
        LineSpec(regexp=r"^c", line="c"),
        b"a\nb\nc\n",
    ),
    (
        "CRLF file: the replaced line keeps CRLF; $ matches before CR",
        b"a\r\nport=80\r\n",
        LineSpec(regexp=r"=80$", line="port=81"),
        b"a\r\nport=81\r\n",
    ),
    (
        "CRLF file: an added line gets CRLF",
        b"a\r\nb\r\n",
        LineSpec(line="c"),
        b"a\r\nb\r\nc\r\n",
    ),
    (
        "last line without a newline, already right: no change (Ansible adds one)",
        b"a\nport=1",
        LineSpec(regexp=r"^port=", line="port=1"),
        None,
    ),
    (
        "no final newline: one is added before the new line",
        b"a",
        LineSpec(line="b"),
        b"a\nb\n",
    ),
    ("empty file", b"", LineSpec(line="x"), b"x\n"),
    # --- present, no regexp
    ("line present: no change", b"a\nb\n", LineSpec(line="a"), None),
    (
        "insertafter regexp: after its last match",
        b"[a]\nk=1\n[a]\nk=2\n[b]\n",
        LineSpec(line="new=1", insertafter=r"^\[a\]"),
        b"[a]\nk=1\n[a]\nnew=1\nk=2\n[b]\n",
    ),
    (
        "insertbefore regexp: before its last match",
        b"a\nEND\n",
        LineSpec(line="z", insertbefore=r"^END$"),
        b"a\nz\nEND\n",
    ),
    (
        "insertbefore BOF",
        b"a\nb\n",
        LineSpec(line="#!/bin/sh", insertbefore="BOF"),
        b"#!/bin/sh\na\nb\n",
    ),
    (
        "insertafter BOF (Ansible: also the start)",
        b"a\n",
        LineSpec(line="z", insertafter="BOF"),
        b"z\na\n",
    ),
    (
        "insertafter EOF",
        b"a\n",
        LineSpec(line="z", insertafter="EOF"),
        b"a\nz\n",
    ),
    (
        "anchor that matches nothing: at the end (as Ansible)",
        b"a\n",
        LineSpec(line="z", insertafter=r"^nothing"),
        b"a\nz\n",
    ),
    (
        "insertafter the last line, which lacks a newline",  # Ansible: b"a\nanchorz\n"
        b"a\nanchor",
        LineSpec(line="z", insertafter=r"^anchor"),
        b"a\nanchor\nz\n",
    ),
    (
        "regexp found wins over insertafter",
        b"a\nport=1\nanchor\n",
        LineSpec(regexp=r"^port", line="port=2", insertafter=r"^anchor"),
        b"a\nport=2\nanchor\n",
    ),
    # --- backrefs
    (
        "backrefs expand the groups",
        b"ExecStart=/bin/x --a\n",
        LineSpec(regexp=r"^(ExecStart=\S+) .*$", line=r"\1 --b", backrefs=True),
        b"ExecStart=/bin/x --b\n",
    ),
    (
        "backrefs, no match: no change (nothing added)",
        b"a\n",
        LineSpec(regexp=r"^(b)=", line=r"\1=2", backrefs=True),
        None,
    ),
    (
        "backrefs already applied: no change",
        b"ExecStart=/bin/x --b\n",
        LineSpec(regexp=r"^(ExecStart=\S+) .*$", line=r"\1 --b", backrefs=True),
        None,
    ),
    # --- absent
    (
        "absent by regexp removes every match",
        b"a\n#x\nb\n#y\n",
        LineSpec(regexp=r"^#", state="absent"),
        b"a\nb\n",
    ),
    (
        "absent by line removes every equal line",
        b"a\nb\na\n",
        LineSpec(line="a", state="absent"),
        b"b\n",
    ),
    ("absent, nothing there: no change", b"a\n", LineSpec(line="z", state="absent"), None),
    (
        "absent keeps CRLF of the other lines",
        b"a\r\nz\r\nb\r\n",
        LineSpec(line="z", state="absent"),
        b"a\r\nb\r\n",
    ),
    # --- bytes that are not UTF-8 pass through
    (
        "latin-1 bytes elsewhere are kept",
        b"caf\xe9=1\nport=1\n",
        LineSpec(regexp=r"^port=", line="port=2"),
        b"caf\xe9=1\nport=2\n",
    ),
    (
        "unicode line",
        b"a\n",
        LineSpec(line="name=café"),
        "a\nname=café\n".encode(),
    ),
]


@pytest.mark.parametrize(
    ("source", "spec", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_line_in_file(source: bytes, spec: LineSpec, expected: bytes | None) -> None:
    result = line_in_file(source, spec)
    if expected is None:
        assert not result.changed, result.summary
        assert result.content == source
        assert result.summary.startswith("no change")
        return
    assert result.changed, result.summary
    assert result.content == expected
    again = line_in_file(result.content, spec)
    assert not again.changed, f"not idempotent: {again.summary}"
    assert again.content == result.content


def test_bad_regexp_is_an_edit_error() -> None:
    with pytest.raises(EditError, match="bad regular expression"):
        line_in_file(b"a\n", LineSpec(regexp="(", line="x"))


def test_backref_to_a_missing_group_is_an_edit_error() -> None:
    with pytest.raises(EditError, match="backrefs"):
        line_in_file(b"a=1\n", LineSpec(regexp=r"^a=", line=r"\2", backrefs=True))
