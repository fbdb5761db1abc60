"""deploy.checks: the AST contract, the tail, and the host-side compile command."""

from __future__ import annotations

import ast
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy import hostsh
from deploy.checks.compile import (
    AHEAD_STATUS,
    AHEAD_VARIABLE,
    NOT_RECORDED,
    compile_command,
    compile_problem,
    compiled_sha256,
    was_reused,
)
from deploy.checks.python_ast import check_python, module_level_definitions
from deploy.checks.tail import check_tail

MODULE = b"""\
import os

class A:
    x = 1
    y, (z, *rest) = 1, (2, 3)
    n: int = 0

    def f(self):
        def inner():
            pass

    async def g(self):
        pass

    class Inner:
        def h(self):
            pass

def helper():
    pass

if os.name == "nt":
    platform_only = 1
try:
    import fast
except ImportError:
    fallback = None

EntryClass = [A]
"""


@pytest.mark.parametrize(
    ("kwargs", "problems"),
    [
        ({}, []),
        ({"class_has": {"A": ["x", "y", "z", "rest", "n", "f", "g", "Inner"]}}, []),
        ({"class_has": {"A.Inner": ["h"]}}, []),
        (
            {"class_has": {"A": ["inner", "h", "helper"]}},
            [
                "m.py: class A (line 3) does not define inner in its body",
                "m.py: class A (line 3) does not define h in its body",
                "m.py: class A (line 3) does not define helper in its body",
            ],
        ),
        (
            {"class_has": {"Inner": ["h"]}},
            ["m.py: class Inner not found; classes there: A, A.Inner"],
        ),
        ({"not_module_level": ["f", "x", "h", "inner"]}, []),
        (
            {"not_module_level": ["helper", "platform_only", "fallback", "A"]},
            [
                "m.py: A is defined at module level (line 3), outside any class",
                "m.py: helper is defined at module level (line 19), outside any class",
                "m.py: platform_only is defined at module level (line 23), outside any class",
                "m.py: fallback is defined at module level (line 27), outside any class",
            ],
        ),
        ({"last_statement": "EntryClass = [A]"}, []),
        ({"last_statement": "EntryClass = [ A ]  # formatting does not count"}, []),
        (
            {"last_statement": "EntryClass = [B]"},
            [
                "m.py: the last statement is 'EntryClass = [A]' (line 29); "
                "expected 'EntryClass = [B]', which is nowhere at top level",
            ],
        ),
    ],
)
def test_check_python(kwargs: dict[str, Any], problems: list[str]) -> None:
    assert check_python(MODULE, path="m.py", **kwargs) == problems


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (b"x = 1\ndef f(:\n", "m.py:2: does not parse: invalid syntax"),
        (b"class A:\nx = 1\n", "m.py:2: does not parse: expected an indented block"),
        (b"x = '\xff'\n", "m.py:1: does not parse: (unicode error)"),
        (b"x = 1\0\n", "m.py: does not parse: source code string cannot contain null bytes"),
    ],
)
def test_check_python_parse_errors(source: bytes, problem: str) -> None:
    (only,) = check_python(source, class_has={"A": ["f"]}, last_statement="x = 1", path="m.py")
    assert only.startswith(problem)


def test_check_python_empty_module_and_bad_expectation() -> None:
    assert check_python(b"# nothing\n", last_statement="x = 1") == [
        "<file>: the module has no statements; expected it to end with 'x = 1'"
    ]
    with pytest.raises(ValueError, match="one statement"):
        check_python(b"x = 1\n", last_statement="x = 1\ny = 2")
    with pytest.raises(ValueError, match="not valid Python"):
        check_python(b"x = 1\n", last_statement="x = (")


def test_check_python_on_crlf_and_latin1() -> None:
    crlf = MODULE.replace(b"\n", b"\r\n")
    assert check_python(crlf, class_has={"A": ["f"]}, last_statement="EntryClass = [A]") == []
    latin = b"# coding: latin-1\nclass A:\n    s = '\xe9'\n"
    assert check_python(latin, class_has={"A": ["s"]}) == []


def test_module_level_definitions_order() -> None:
    names = [name for name, _ in module_level_definitions(ast.parse(MODULE))]
    assert names == ["A", "helper", "platform_only", "fallback", "EntryClass"]


def test_check_python_real_files(kimi_source: Callable[[str], bytes]) -> None:
    kimi = "KimiK25ForConditionalGeneration"
    eagle3 = ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
    contract: dict[str, Any] = {
        "class_has": {kimi: eagle3},
        "not_module_level": eagle3,
        "last_statement": f"EntryClass = [{kimi}]",
    }
    assert check_python(kimi_source("0.5.10"), **contract) == []
    assert check_python(kimi_source("0.5.9"), **contract) == [
        f"<file>: class {kimi} (line 648) does not define {name} in its body" for name in eagle3
    ]


@pytest.mark.parametrize(
    ("source", "expected", "kwargs", "problems"),
    [
        (b"a\nb\nc\n", ["b", "c"], {}, []),
        (b"a\r\nb\r\nc", ["b", "c"], {}, []),
        (b"a\nb\nc\n\n\n", ["b", "c"], {}, []),
        (b"a\nb\nc\n \n", ["b", "c", ""], {}, []),
        (
            b"a\nb\nc\n\n",
            ["b", "c"],
            {"ignore_blank": False},
            ["f:3: expected 'b', found 'c'", "f:4: expected 'c', found ''"],
        ),
        (b"a\nb\nc\n\n", ["c", ""], {"ignore_blank": False}, []),
        (b"a\nX\nc\n", ["b", "c"], {}, ["f:2: expected 'b', found 'X'"]),
        (b"c\n", ["b", "c"], {}, ["f: has 1 line, expected it to end with these 2: ['b', 'c']"]),
        (b"", [], {}, []),
        (b"x = '\xe9'\n", ["x = '\ufffd'"], {}, []),
    ],
)
def test_check_tail(
    source: bytes, expected: list[str], kwargs: dict[str, bool], problems: list[str]
) -> None:
    assert check_tail(source, expected, path="f", **kwargs) == problems


def _tail_as_before(source: bytes, expected: list[str], ignore_blank: bool) -> list[str]:
    """`check_tail` as it was when it decoded every line: the oracle for the one that decodes
    only the tail."""
    actual = [line.decode("utf-8", errors="replace") for line in source.splitlines()]
    wanted = list(expected)
    if ignore_blank:
        while actual and not actual[-1].strip():
            actual.pop()
        while wanted and not wanted[-1].strip():
            wanted.pop()
    if not wanted:
        return []
    if len(actual) < len(wanted):
        return [
            f"f: has {len(actual)} line{'s' if len(actual) != 1 else ''}, "
            f"expected it to end with these {len(wanted)}: {wanted!r}"
        ]
    first = len(actual) - len(wanted)
    return [
        f"f:{first + index + 1}: expected {want!r}, found {got!r}"
        for index, (want, got) in enumerate(zip(wanted, actual[first:], strict=True))
        if want != got
    ]


def test_check_tail_decodes_only_the_tail_and_says_what_decoding_all_said() -> None:
    import itertools

    from deploy.checks import tail

    pieces = [b"a", b"b", b"", b" ", b"\x0c", b"\xe9", b"\xc3", b"\xa9"]
    endings = [b"\n", b"\r\n", b"\r"]
    sources = [b""]
    for count in (1, 2, 3):
        for lines in itertools.product(pieces, repeat=count):
            sources += [e.join(lines) + e for e in endings] + [b"\n".join(lines)]
    expectations = [[], ["b"], ["a", "b"], ["b", ""], ["", ""], ["\ufffd"], ["é"], [" ", "b"]]
    for source, expected, blank in itertools.product(sources, expectations, (True, False)):
        got = check_tail(source, expected, ignore_blank=blank, path="f")
        assert got == _tail_as_before(source, expected, blank), (source, expected, blank)

    decoded: list[bytes] = []
    real = tail._text
    big = b"".join(b"line %d\n" % n for n in range(5000)) + b"EntryClass = [A]\n\n\n"
    try:
        tail._text = lambda line: decoded.append(line) or real(line)  # type: ignore[assignment]
        assert check_tail(big, ["EntryClass = [A]"], path="f") == []
    finally:
        tail._text = real  # type: ignore[assignment]
    assert len(decoded) == 4, "the blank lines at the end and the last line, then the one compared"


def test_compile_command_quotes_every_argument() -> None:
    python, path = "/opt/my venv/bin/python", "/srv/it's here.py"
    command = compile_command(python, path)
    # What varies is quoted assignments before ``deploy/hostsh/compile.sh``'s text.
    preamble = command.removesuffix(hostsh.text("compile.sh"))
    assert preamble != command
    shown = subprocess.run(
        ["sh", "-c", preamble + 'printf "%s\\n" "$_tY" "$_tD" "$_tF"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.splitlines() == [python, path, path]
    # what a trusted interpreter runs (deploy.checks.interpreter: the host checks it first)
    # (by the resolved path the check judged, else the one found, else the name: exit 127)
    assert '[ -n "$_tE" ] || _tE=$_tY\n' in command
    assert '|| exec "$_tE" -B -I -S -c "$_tC" "$_tD"\n' in command


@pytest.mark.parametrize(
    ("source", "status", "problem"),
    [
        (b"x = 1\n", 0, None),
        (
            b"x = (\n",
            1,
            "does not compile with PY: SyntaxError: '(' was never closed (m.py, line 1)",
        ),
        (
            b"def f():\nreturn\n",
            1,
            "does not compile with PY: IndentationError: expected an "
            "indented block after function definition on line 1 (m.py, line 2)",
        ),
    ],
)
def test_compile_command_runs_and_writes_nothing(
    tmp_path: Path, source: bytes, status: int, problem: str | None
) -> None:
    target = tmp_path / "m.py"
    target.write_bytes(source)
    command = compile_command(sys.executable, str(target))
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
    assert proc.returncode == status
    expected = problem.replace("PY", sys.executable) if problem else None
    assert compile_problem(proc.returncode, proc.stderr, python=sys.executable) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]  # no __pycache__, no .pyc


@pytest.mark.parametrize(
    ("status", "stderr", "python", "problem"),
    [
        (0, "", None, None),
        (127, "sh: 1: /x/python: not found\n", "/x/python", "interpreter not found: /x/python"),
        (127, "", None, "interpreter not found"),
        (126, "Permission denied", "py", "interpreter cannot be executed (permission denied?): py"),
        (
            1,
            "Traceback...\nSyntaxError: bad (f.py, line 3)\n\n",
            None,
            "does not compile: SyntaxError: bad (f.py, line 3)",
        ),
        (1, "", "py", "does not compile with py: exit status 1, no output"),
    ],
)
def test_compile_problem(status: int, stderr: str, python: str | None, problem: str | None) -> None:
    assert compile_problem(status, stderr, python=python) == problem


# -- the compile cache (state_dir/compiled), run by a real sh on real interpreters ------------


def _interpreter(tmp_path: Path) -> Path:
    """A private copy of this interpreter's binary, with a libpython beside it.

    The copy runs like the original (a dynamically linked one finds its libpython through
    its run path), and its identity — and that of ``lib/libpython*`` — is ours to change.
    """
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    binary = prefix / "bin" / "python3"
    shutil.copy2(os.path.realpath(sys.executable), binary)
    (prefix / "lib" / "libpython3.so.1.0").write_bytes(b"stands for the interpreter's library")
    return binary


def _compile(python: Path | str, target: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    command = compile_command(str(python), str(target), cache=str(cache))
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)


def test_a_passed_compile_is_reused_while_bytes_and_interpreter_stay(tmp_path: Path) -> None:
    python, target, cache = _interpreter(tmp_path), tmp_path / "m.py", tmp_path / "compiled"
    target.write_bytes(b"x = 1\n")
    first = _compile(python, target, cache)
    digest = hashlib.sha256(b"x = 1\n").hexdigest()
    # Each answer names the bytes it is about (a check sent ahead counts only for them).
    assert (first.returncode, first.stdout, first.stderr) == (0, digest + "\n", "")
    assert not was_reused(first.stdout) and compiled_sha256(first.stdout) == digest
    (record,) = cache.iterdir()
    assert record.name == digest
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    second = _compile(python, target, cache)
    assert second.returncode == 0 and was_reused(second.stdout)
    assert compiled_sha256(second.stdout) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compiled", "m.py", "prefix"]

    # Other bytes: compiled again, and recorded under their own sha256.
    target.write_bytes(b"x = 2\n")
    third = _compile(python, target, cache)
    assert third.returncode == 0 and not was_reused(third.stdout)
    assert len(list(cache.iterdir())) == 2

    # The interpreter binary replaced (here: its mtime), or its libpython: compiled again.
    target.write_bytes(b"x = 1\n")
    os.utime(python, (1_000_000_000, 1_000_000_000))
    assert not was_reused(_compile(python, target, cache).stdout)
    assert was_reused(_compile(python, target, cache).stdout)
    os.utime(python.parent.parent / "lib" / "libpython3.so.1.0", (1_000_000_000, 1_000_000_000))
    assert not was_reused(_compile(python, target, cache).stdout)


def test_a_check_sent_ahead_answers_from_the_record_only(tmp_path: Path) -> None:
    """With AHEAD_VARIABLE set (the lock's commands sent ahead) a miss compiles nothing and says
    so with a failure, never a pass: a stray variable cannot turn a real check into a pass."""
    python, target, cache = _interpreter(tmp_path), tmp_path / "m.py", tmp_path / "compiled"
    target.write_bytes(b"x = (\n")
    command = compile_command(str(python), str(target), cache=str(cache))
    ahead = f"{AHEAD_VARIABLE}=1; {command}"
    miss = subprocess.run(["sh", "-c", ahead], capture_output=True, text=True, check=False)
    assert (miss.returncode, miss.stdout) == (AHEAD_STATUS, "")
    assert compile_problem(miss.returncode, miss.stderr) == f"does not compile: {NOT_RECORDED}"
    assert not cache.exists(), "nothing compiled, nothing recorded"
    target.write_bytes(b"x = 1\n")
    assert _compile(python, target, cache).returncode == 0
    hit = subprocess.run(["sh", "-c", ahead], capture_output=True, text=True, check=False)
    assert hit.returncode == 0 and was_reused(hit.stdout)
    assert compiled_sha256(hit.stdout) == hashlib.sha256(b"x = 1\n").hexdigest()


def test_a_failed_compile_is_never_recorded(tmp_path: Path) -> None:
    python, target, cache = _interpreter(tmp_path), tmp_path / "m.py", tmp_path / "compiled"
    target.write_bytes(b"x = (\n")
    for _ in range(2):
        result = _compile(python, target, cache)
        assert result.returncode == 1
        problem = compile_problem(result.returncode, result.stderr, python="PY")
        assert (
            problem == "does not compile with PY: SyntaxError: '(' was never closed (m.py, line 1)"
        )
    assert not cache.exists()


def test_no_cache_through_a_wrapper_script_or_a_missing_interpreter(tmp_path: Path) -> None:
    """A wrapper (a pyenv shim, ``#!/bin/sh`` + exec) may start another interpreter without
    changing itself: its identity says nothing, so every run compiles."""
    real = _interpreter(tmp_path)
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(str(real))} "$@"\n')
    wrapper.chmod(0o755)
    target, cache = tmp_path / "m.py", tmp_path / "compiled"
    target.write_bytes(b"x = 1\n")
    for _ in range(2):
        result = _compile(wrapper, target, cache)
        assert result.returncode == 0 and not was_reused(result.stdout)
    assert not cache.exists()
    missing = _compile(tmp_path / "no-such-python", target, cache)
    assert missing.returncode == 127
    assert compile_problem(missing.returncode, missing.stderr) == "interpreter not found"


def test_the_cached_command_quotes_every_path(tmp_path: Path) -> None:
    odd = tmp_path / "it's $(touch pwned) `x`"
    odd.mkdir()
    python, target = _interpreter(odd), odd / "m; rm -rf ~.py"
    target.write_bytes(b"x = 1\n")
    cache = odd / "comp iled"
    assert _compile(python, target, cache).returncode == 0
    assert was_reused(_compile(python, target, cache).stdout)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
