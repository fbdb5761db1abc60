"""deploy.edits.pyinsert: structure-aware insertion into a class, on synthetic and real files."""

from __future__ import annotations

import ast
import difflib
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from deploy.checks.python_ast import check_python
from deploy.edits.pyinsert import ClassNotFound, MemberConflict, insert_into_class
from deploy.edits.text import append_text
from deploy.errors import EditError
from deploy.steps.python_insert import PythonInsertArgs

G = "def g(self):\n    return 2\n"


def src(text: str) -> bytes:
    """A test source written indented in this file, as bytes."""
    return textwrap.dedent(text).lstrip("\n").encode()


# (id, source, class_name, code, keyword arguments, expected source)
CASES: list[tuple[str, bytes, str, str, dict[str, Any], bytes]] = [
    (
        "end, before module-level code",
        src("""
            class A:
                def f(self):
                    return 1


            EntryClass = [A]
            """),
        "A",
        G,
        {},
        src("""
            class A:
                def f(self):
                    return 1

                def g(self):
                    return 2


            EntryClass = [A]
            """),
    ),
    (
        "crlf",
        b"class A:\r\n    def f(self):\r\n        return 1\r\n\r\n\r\nx = A()\r\n",
        "A",
        G,
        {},
        b"class A:\r\n    def f(self):\r\n        return 1\r\n\r\n    def g(self):\r\n"
        b"        return 2\r\n\r\n\r\nx = A()\r\n",
    ),
    (
        "old Mac CR newlines",
        b"class A:\r    x = 1\r\rB = 1\r",
        "A",
        G,
        {},
        b"class A:\r    x = 1\r\r    def g(self):\r        return 2\r\rB = 1\r",
    ),
    (
        "code indented with tabs, file with spaces",
        b"class A:\n    x = 1\n",
        "A",
        "\tdef g(self):\n\t\tif self:\n\t\t\treturn 2\n",
        {},
        b"class A:\n    x = 1\n\n    def g(self):\n        if self:\n            return 2\n",
    ),
    (
        "no trailing newline stays without one",
        b"class A:\n    x = 1",
        "A",
        G,
        {},
        b"class A:\n    x = 1\n\n    def g(self):\n        return 2",
    ),
    (
        "tabs",
        b"class A:\n\tdef f(self):\n\t\treturn 1\n",
        "A",
        "def g(self):\n    if self:\n        return 2\n",
        {},
        b"class A:\n\tdef f(self):\n\t\treturn 1\n\n\tdef g(self):\n\t\tif self:\n\t\t\treturn 2\n",
    ),
    (
        "two-space file, code indented anyhow",
        b"class A:\n  def f(self):\n    return 1\n",
        "A",
        "        def g(self):\n            if self:\n                return 2\n",
        {},
        b"class A:\n  def f(self):\n    return 1\n\n  def g(self):\n    if self:\n      return 2\n",
    ),
    (
        "class followed directly by another class",
        src("""
            class A:
                def f(self):
                    pass
            class B:
                pass
            """),
        "A",
        G,
        {},
        src("""
            class A:
                def f(self):
                    pass

                def g(self):
                    return 2

            class B:
                pass
            """),
    ),
    (
        "comments after the last method stay inside, module comments outside",
        src("""
            class A:
                def f(self):
                    return 1
                    # still in f

                # class-level trailing comment

            # about EntryClass
            EntryClass = [A]
            """),
        "A",
        G,
        {},
        src("""
            class A:
                def f(self):
                    return 1
                    # still in f

                # class-level trailing comment

                def g(self):
                    return 2

            # about EntryClass
            EntryClass = [A]
            """),
    ),
    (
        "nested class",
        src("""
            class Outer:
                class Inner:
                    a = 1

                def m(self):
                    pass
            """),
        "Outer.Inner",
        G,
        {},
        src("""
            class Outer:
                class Inner:
                    a = 1

                    def g(self):
                        return 2

                def m(self):
                    pass
            """),
    ),
    (
        "before a decorated method goes above its decorators and comment",
        src("""
            class A:
                x = 1

                # the f property
                @property
                @other
                def f(self):
                    return 1
            """),
        "A",
        G,
        {"where": ("before", "f")},
        src("""
            class A:
                x = 1

                def g(self):
                    return 2

                # the f property
                @property
                @other
                def f(self):
                    return 1
            """),
    ),
    (
        "before the first member",
        src("""
            class A:
                def f(self):
                    pass
            """),
        "A",
        G,
        {"where": ("before", "f")},
        src("""
            class A:
                def g(self):
                    return 2

                def f(self):
                    pass
            """),
    ),
    (
        "after a member in the middle",
        src("""
            class A:
                def f(self):
                    pass
                    # end of f

                def h(self):
                    pass
            """),
        "A",
        G,
        {"where": ("after", "f")},
        src("""
            class A:
                def f(self):
                    pass
                    # end of f

                def g(self):
                    return 2

                def h(self):
                    pass
            """),
    ),
    (
        "after an assignment with no blank line below",
        b"class A:\n    x = 1\n    y = 2\n",
        "A",
        "z: int = 3",
        {"where": ("after", "x")},
        b"class A:\n    x = 1\n\n    z: int = 3\n\n    y = 2\n",
    ),
    (
        "after the last member is the end",
        b"class A:\n    x = 1\n    # trailing\nB = 1\n",
        "A",
        "y = 2",
        {"where": ("after", "x")},
        b"class A:\n    x = 1\n    # trailing\n\n    y = 2\n\nB = 1\n",
    ),
    (
        "class with only a docstring",
        b'class A:\n    """Doc."""\n',
        "A",
        "async def g(self):\n    await x\n",
        {},
        b'class A:\n    """Doc."""\n\n    async def g(self):\n        await x\n',
    ),
    (
        "several items, comments kept, one blank line apart",
        b"class A:\n    x = 1\n",
        "A",
        "\n\n    # first\n    def g(self):\n        pass\n\n\n\n    # second\n"
        "    @staticmethod\n    def h():\n        pass\n    # trailing\n\n",
        {},
        b"class A:\n    x = 1\n\n    # first\n    def g(self):\n        pass\n\n    # second\n"
        b"    @staticmethod\n    def h():\n        pass\n    # trailing\n",
    ),
    (
        "only the missing item is inserted",
        b"class A:\n    def g(self):\n        return (2)  # same AST\n",
        "A",
        G + "def h(self):\n    pass\n",
        {},
        b"class A:\n    def g(self):\n        return (2)  # same AST\n\n"
        b"    def h(self):\n        pass\n",
    ),
    (
        "if_exists=replace swaps the member and its decorators in place",
        src("""
            class A:
                @old
                def g(self):
                    return 1
                    # old comment

                def h(self):
                    pass
            """),
        "A",
        "@new\ndef g(self):\n    return 2\n",
        {"if_exists": "replace"},
        src("""
            class A:
                @new
                def g(self):
                    return 2

                def h(self):
                    pass
            """),
    ),
    (
        "replace and insert in one go",
        b"class A:\n    def g(self):\n        return 1\n",
        "A",
        G + "def h(self):\n    pass\n",
        {"if_exists": "replace", "where": ("before", "g")},
        b"class A:\n    def h(self):\n        pass\n\n    def g(self):\n        return 2\n",
    ),
    (
        "if_exists=keep leaves a different member and inserts the missing one",
        b"class A:\n    @cached\n    async def g(self):\n        return 99\n",
        "A",
        G + "def h(self):\n    pass\n",
        {"if_exists": "keep"},
        b"class A:\n    @cached\n    async def g(self):\n        return 99\n\n"
        b"    def h(self):\n        pass\n",
    ),
    (
        "latin-1 file with a coding cookie",
        b"# -*- coding: latin-1 -*-\nclass A:\n    s = '\xe9'\n",
        "A",
        "def g(self):\n    return '\u00e8'\n",
        {},
        b"# -*- coding: latin-1 -*-\nclass A:\n    s = '\xe9'\n\n"
        b"    def g(self):\n        return '\xe8'\n",
    ),
    (
        "utf-8 BOM kept once",
        b"\xef\xbb\xbfclass A:\n    x = 1\n",
        "A",
        "def g(self):\n    return '\u00e9'\n",
        {},
        b"\xef\xbb\xbfclass A:\n    x = 1\n\n    def g(self):\n        return '\xc3\xa9'\n",
    ),
]


@pytest.mark.parametrize(
    ("source", "class_name", "code", "kwargs", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_insert(
    source: bytes, class_name: str, code: str, kwargs: dict[str, Any], expected: bytes
) -> None:
    result = insert_into_class(source, class_name, code, **kwargs)
    assert result.changed
    assert result.content == expected
    again = insert_into_class(result.content, class_name, code, **kwargs)
    assert not again.changed, "a re-run must be a no-op"
    assert again.content == result.content
    assert again.summary.startswith("no change:")


def test_summaries() -> None:
    source = b"class A:\n    def g(self):\n        return 1\n\n    def f(self):\n        pass\n"
    assert insert_into_class(source, "A", "def h(self):\n    pass\n").summary == (
        "inserted h at the end of class A"
    )
    assert insert_into_class(source, "A", "x = 1", where=("after", "g")).summary == (
        "inserted x after g in class A"
    )
    assert insert_into_class(source, "A", G, if_exists="replace").summary == (
        "replaced g (line 2) in class A"
    )
    partial = insert_into_class(source, "A", "def f(self):\n    pass\ny = 2")
    assert partial.summary == "inserted y at the end of class A (f already present)"
    same = insert_into_class(source, "A", "def f(self):\n  pass  # reformatted\n")
    assert same.summary == "no change: f already present with the same body in class A"


def test_conflict_names_member_class_path_and_line() -> None:
    source = b"class A:\n    x = 0\n\n    def g(self):\n        return 1\n"
    with pytest.raises(MemberConflict) as info:
        insert_into_class(source, "A", G, path="/srv/m.py")
    error = info.value
    assert (error.member, error.class_name, error.path, error.line) == ("g", "A", "/srv/m.py", 4)
    assert "/srv/m.py:4: class A already has g (line 4) with a different definition" in str(error)


def test_docstrings_count_in_the_comparison() -> None:
    source = b'class A:\n    def g(self):\n        """Old."""\n        return 2\n'
    with pytest.raises(MemberConflict):
        insert_into_class(source, "A", 'def g(self):\n    """New."""\n    return 2\n')


@pytest.mark.parametrize(
    ("source", "class_name", "code", "kwargs", "error", "message"),
    [
        (
            b"class A:\n    pass\nclass B:\n    class C:\n        pass\n",
            "Z",
            G,
            {},
            ClassNotFound,
            r"^class Z not found in m\.py; classes there: A, B, B\.C$",
        ),
        (
            b"class B:\n    class C:\n        pass\n",
            "C",
            G,
            {},
            ClassNotFound,
            "class C not found",
        ),  # a nested class is not a top-level one
        (
            b"def f():\n    class A:\n        pass\n",
            "A",
            G,
            {},
            ClassNotFound,
            "classes there: none",
        ),
        (b"x = 1\nclass A(:\n", "A", G, {}, EditError, r"^m\.py:2: does not parse"),
        (
            b"class A:\n    pass\n",
            "A",
            "def g(self)\n    pass\n",
            {},
            EditError,
            "code to insert does not parse: line 1",
        ),
        (b"class A:\n    pass\n", "A", "   \n", {}, EditError, "empty"),
        (b"class A:\n    pass\n", "A", "# just a comment\n", {}, EditError, "empty"),
        (b"class A:\n    pass\n", "A", "print(1)\n", {}, EditError, "only definitions"),
        (b"class A:\n    pass\n", "A", "a = b = 1\n", {}, EditError, "only definitions"),
        (b"class A:\n    pass\n", "A", G + G, {}, EditError, "defines g twice"),
        (
            b"class A:\n    x = 1\n",
            "A",
            G,
            {"where": ("after", "nope")},
            EditError,
            r"anchor nope is not a member of class A \(members: x\)",
        ),
        (b"class A:\n    x = 1\n", "A", G, {"where": "middle"}, EditError, "where must be"),
        (b"class A: pass\n", "A", G, {}, EditError, "body on the class line"),
        (
            b"class A:\n    x = 1\nclass A:\n    y = 1\n",
            "A",
            G,
            {},
            EditError,
            r"defined 2 times in m\.py \(lines 1, 3\); refusing to guess",
        ),
        (
            b"# coding: latin-1\nclass A:\n    x = 1\n",
            "A",
            "y = '\u2192'",
            {},
            EditError,
            "cannot encode",
        ),
    ],
)
def test_errors(
    source: bytes,
    class_name: str,
    code: str,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        insert_into_class(source, class_name, code, path="m.py", **kwargs)


# ---- the real SGLang files -------------------------------------------------------------------

KIMI = "KimiK25ForConditionalGeneration"
EAGLE3 = ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
ENTRY = f"EntryClass = [{KIMI}]"


def methods_of(source: bytes, class_name: str, names: list[str]) -> str:
    """The source text of ``names`` exactly as ``class_name`` in ``source`` defines them."""
    lines = source.decode().splitlines(keepends=True)
    cls = next(
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name
    )
    chunks = []
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            chunks.append("".join(lines[first - 1 : node.end_lineno]))
    assert len(chunks) == len(names)
    return "\n".join(chunks)


@pytest.fixture(scope="module")
def eagle3_code(kimi_source: Callable[[str], bytes]) -> str:
    return methods_of(kimi_source("0.5.10"), KIMI, EAGLE3)


def member_dumps(source: bytes) -> dict[str, str]:
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == KIMI)
    return {n.name: ast.dump(n) for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_real_0_5_9_gets_the_methods_inside_the_class(
    kimi_source: Callable[[str], bytes], eagle3_code: str
) -> None:
    before = kimi_source("0.5.9")
    result = insert_into_class(before, KIMI, eagle3_code, path="kimi_k25.py")
    assert result.changed
    assert result.summary == f"inserted {', '.join(EAGLE3)} at the end of class {KIMI}"
    after = result.content
    assert (
        check_python(after, class_has={KIMI: EAGLE3}, not_module_level=EAGLE3, last_statement=ENTRY)
        == []
    )
    compile(after, "kimi_k25.py", "exec")
    # the three methods are 0.5.10's, node for node
    wanted = member_dumps(kimi_source("0.5.10"))
    got = member_dumps(after)
    assert all(got[name] == wanted[name] for name in EAGLE3)
    # everything else is byte-identical: the only differences are inserted lines
    old_lines, new_lines = before.splitlines(keepends=True), after.splitlines(keepends=True)
    opcodes = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
    assert {tag for tag, *_ in opcodes} == {"equal", "insert"}
    inserted = [i for tag, _, _, j1, j2 in opcodes if tag == "insert" for i in range(j1, j2)]
    assert [line for i, line in enumerate(new_lines) if i not in set(inserted)] == old_lines
    # and they sit before the blank lines that precede EntryClass
    assert after.endswith(
        b"        self.language_model.set_embed_and_head(embed, head)\n"
        b"\n\n" + ENTRY.encode() + b"\n"
    )
    # a re-run on the result is a no-op
    assert not insert_into_class(after, KIMI, eagle3_code).changed


def test_real_0_5_10_is_a_no_op(kimi_source: Callable[[str], bytes], eagle3_code: str) -> None:
    source = kimi_source("0.5.10")
    result = insert_into_class(source, KIMI, eagle3_code)
    assert not result.changed
    assert result.content == source
    assert result.summary == (
        f"no change: {', '.join(EAGLE3)} already present with the same body in class {KIMI}"
    )


def test_real_0_5_9_with_crlf_stays_crlf(
    kimi_source: Callable[[str], bytes], eagle3_code: str
) -> None:
    crlf = kimi_source("0.5.9").replace(b"\n", b"\r\n")
    after = insert_into_class(crlf, KIMI, eagle3_code).content
    assert b"\n" not in after.replace(b"\r\n", b"")
    assert (
        after.replace(b"\r\n", b"\n")
        == insert_into_class(kimi_source("0.5.9"), KIMI, eagle3_code).content
    )


def test_real_appending_is_the_classic_mistake(
    kimi_source: Callable[[str], bytes], eagle3_code: str
) -> None:
    appended = append_text(kimi_source("0.5.9"), textwrap.dedent(eagle3_code)).content
    compile(appended, "kimi_k25.py", "exec")  # it compiles...
    problems = check_python(
        appended,
        class_has={KIMI: EAGLE3},
        not_module_level=EAGLE3,
        last_statement=ENTRY,
        path="kimi_k25.py",
    )
    # ...but the methods are at module level, not in the class, and EntryClass is not last
    assert problems[0] == (
        f"kimi_k25.py: class {KIMI} (line 648) does not define set_eagle3_layers_to_capture "
        "in its body"
    )
    assert (
        "kimi_k25.py: set_eagle3_layers_to_capture is defined at module level (line 777), "
        "outside any class" in problems
    )
    assert len(problems) == 7
    assert problems[-1].startswith("kimi_k25.py: the last statement is 'def set_embed_and_head(")
    assert problems[-1].endswith(f"expected {ENTRY!r}, which is at line 776")


# ---- if_exists: a later release that already has the methods, in whatever form ----------------


def _swap(old: str, new: str) -> Callable[[bytes], bytes]:
    def change(source: bytes) -> bytes:
        assert source.count(old.encode()) == 1, old
        return source.replace(old.encode(), new.encode())

    return change


#: (id, a change to the real 0.5.10 file, the methods whose definition then differs)
LATER_RELEASES: list[tuple[str, Callable[[bytes], bytes], list[str]]] = [
    (
        "another body",
        _swap(
            "        return self.language_model.get_embed_and_head()\n",
            "        lm = self.language_model\n"
            "        return lm.model.embed_tokens.weight, lm.lm_head.weight\n",
        ),
        ["get_embed_and_head"],
    ),
    (
        "a decorator",
        _swap(
            "    def get_embed_and_head(self)",
            "    @torch.no_grad()\n    def get_embed_and_head(self)",
        ),
        ["get_embed_and_head"],
    ),
    (
        "async def",
        _swap("    def set_embed_and_head(", "    async def set_embed_and_head("),
        ["set_embed_and_head"],
    ),
    (
        "a docstring-only change",
        _swap(
            '"""Set the layers to capture for EAGLE3 speculative decoding."""',
            '"""Choose the target layers whose hidden states EAGLE-3 reads."""',
        ),
        ["set_eagle3_layers_to_capture"],
    ),
    (
        "all three rewritten",
        lambda source: _swap(
            "    def set_eagle3_layers_to_capture(", "    async def set_eagle3_layers_to_capture("
        )(
            _swap(
                "    def get_embed_and_head(self)",
                "    @staticmethod\n    def get_embed_and_head(self)",
            )(
                _swap(
                    "        self.language_model.set_embed_and_head(embed, head)\n",
                    "        self.language_model.set_embed_and_head(head=head, embed=embed)\n",
                )(source)
            )
        ),
        EAGLE3,
    ),
]


@pytest.mark.parametrize(
    ("change", "differing"),
    [case[1:] for case in LATER_RELEASES],
    ids=[case[0] for case in LATER_RELEASES],
)
def test_later_release_variants(
    kimi_source: Callable[[str], bytes],
    eagle3_code: str,
    change: Callable[[bytes], bytes],
    differing: list[str],
) -> None:
    later = change(kimi_source("0.5.10"))
    compile(later, "kimi_k25.py", "exec")
    assert later != kimi_source("0.5.10")

    kept = insert_into_class(later, KIMI, eagle3_code, if_exists="keep")
    assert not kept.changed
    assert kept.content is later or kept.content == later  # byte-identical
    assert kept.summary.startswith("no change:")
    assert f"{', '.join(differing)} already defined with another body (kept)" in kept.summary

    with pytest.raises(MemberConflict) as info:
        insert_into_class(later, KIMI, eagle3_code, if_exists="fail")
    assert info.value.member == differing[0]
    assert "if_exists: keep" in str(info.value)

    # replace puts 0.5.10's own methods back, decorators included: the file becomes 0.5.10's
    replaced = insert_into_class(later, KIMI, eagle3_code, if_exists="replace")
    assert replaced.changed and replaced.content == kimi_source("0.5.10")


def test_keep_with_one_of_three_present_inserts_the_other_two(
    kimi_source: Callable[[str], bytes], eagle3_code: str
) -> None:
    """A 0.5.9 file where someone already added get_embed_and_head, their own way."""
    theirs = (
        "    @torch.no_grad()\n"
        "    def get_embed_and_head(self):\n"
        "        # our own backport\n"
        "        return self.language_model.get_embed_and_head()\n"
    )
    old = kimi_source("0.5.9")
    base = insert_into_class(old, KIMI, textwrap.dedent(theirs)).content
    result = insert_into_class(base, KIMI, eagle3_code, if_exists="keep", path="kimi_k25.py")
    assert result.changed
    assert result.summary == (
        f"inserted set_eagle3_layers_to_capture, set_embed_and_head at the end of class {KIMI} "
        "(get_embed_and_head kept as defined)"
    )
    after = result.content
    assert theirs.encode() in after, "the existing method is kept byte for byte"
    assert after.count(b"def get_embed_and_head") == 1
    assert (
        check_python(after, class_has={KIMI: EAGLE3}, not_module_level=EAGLE3, last_statement=ENTRY)
        == []
    )
    wanted, got = member_dumps(kimi_source("0.5.10")), member_dumps(after)
    assert got["set_eagle3_layers_to_capture"] == wanted["set_eagle3_layers_to_capture"]
    assert got["set_embed_and_head"] == wanted["set_embed_and_head"]
    # only lines were inserted: everything that was there is still there, in order
    opcodes = difflib.SequenceMatcher(
        None, base.splitlines(), after.splitlines(), autojunk=False
    ).get_opcodes()
    assert {tag for tag, *_ in opcodes} == {"equal", "insert"}
    again = insert_into_class(after, KIMI, eagle3_code, if_exists="keep")
    assert not again.changed and again.content == after


def test_keep_on_the_real_files(kimi_source: Callable[[str], bytes], eagle3_code: str) -> None:
    """keep behaves like fail wherever nothing differs: 0.5.9 gets all three, 0.5.10 none."""
    for version in ("0.5.9", "0.5.10"):
        source = kimi_source(version)
        assert (
            insert_into_class(source, KIMI, eagle3_code, if_exists="keep").content
            == insert_into_class(source, KIMI, eagle3_code).content
        )


def test_keep_counts_any_member_of_that_name() -> None:
    """Kept even when the name is bound another way (an alias): the class defines it."""
    source = b"class A:\n    def f(self):\n        return 1\n\n    g = f\n"
    result = insert_into_class(source, "A", G, if_exists="keep")
    assert not result.changed and result.content == source
    assert result.summary == "no change: g already defined with another body (kept) in class A"


@pytest.mark.parametrize(
    ("raw", "if_exists"),
    [
        ({}, "fail"),
        ({"if_exists": "keep"}, "keep"),
        ({"if_exists": "replace"}, "replace"),
        ({"replace": True}, "replace"),  # the old spelling still works
        ({"replace": False}, "fail"),
    ],
)
def test_config_if_exists_and_the_old_replace_key(raw: dict[str, Any], if_exists: str) -> None:
    args = PythonInsertArgs.model_validate({"path": "/m.py", "class": "A", "code": G, **raw})
    assert args.if_exists == if_exists


def test_config_refuses_both_spellings_and_unknown_values() -> None:
    with pytest.raises(ValueError, match="give if_exists only"):
        PythonInsertArgs.model_validate(
            {"path": "/m.py", "class": "A", "code": G, "if_exists": "keep", "replace": True}
        )
    with pytest.raises(ValueError, match="if_exists"):
        PythonInsertArgs.model_validate(
            {"path": "/m.py", "class": "A", "code": G, "if_exists": "Keep"}
        )
    with pytest.raises(EditError, match="if_exists must be one of keep, replace, fail"):
        insert_into_class(b"class A:\n    x = 1\n", "A", G, if_exists="skip")  # type: ignore[arg-type]
