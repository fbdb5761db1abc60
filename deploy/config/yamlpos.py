"""Load YAML keeping the line and column of every key and value, so errors can point at them.

`load_yaml` returns the plain Python data (what ``yaml.safe_load`` would give) together with a
`Positions` table: key path -> (line, column), 1-based, for each value and for each mapping
key. A key path is a tuple of mapping keys and list indexes, e.g.
``("steps", 0, "python_insert", "class")``. Error reporting looks a path up and, when that
exact path does not exist (a missing key, say), falls back to the nearest ancestor, so every
error gets *some* line.

Choices worth knowing:

- Every error is worded by the pure-Python ``yaml.SafeLoader``: libyaml's messages drop the
  very detail a user needs ("found undefined alias" without the alias, "cannot start any
  token" without the character). But where libyaml is present its parser (``CSafeLoader``)
  reads the file first: ~10x faster (~20 ms of a ``deploy`` start for the shipped playbook),
  with the same constructor and resolver, hence the same data, and node marks with the same
  line and column (`tests/unit/test_config_yaml.py` compares both on every YAML file of the
  repository). Anything it refuses or that our checks refuse is parsed again by the
  pure-Python loader, so an error reads the same on every machine. Text with characters YAML
  forbids, with characters libyaml is more lenient about (`_LIBYAML_LENIENT`) or with more
  nesting indicators than `C_PARSER_MAX_INDICATORS` (libyaml's composer recurses in C, with
  no recursion limit) goes to the pure-Python loader directly: both accept the same files.
- Duplicate keys are errors. YAML loaders silently keep the last one, which turns a pasted-twice
  ``path:`` into a deploy to the wrong file. Keys brought in by a ``<<:`` merge may be
  overridden, as YAML intends.
- Aliases are fine, but a recursive alias or an alias "bomb" (a few lines expanding to millions
  of nodes, or to more than `MAX_EXPANDED_CHARS` of text: a 1 MB string aliased a thousand
  times) is refused: the data is walked by pydantic and by the templating, which would loop
  or explode.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from deploy.errors import InputError, SourcePosition

PathItem = str | int
KeyPath = tuple[PathItem, ...]
LineCol = tuple[int, int]

#: Most nodes a document may expand to once aliases are followed; real files have thousands.
MAX_EXPANDED_NODES = 1_000_000
#: Most characters of scalar text a document may expand to once aliases are followed: a 1 MB
#: string aliased a thousand times is a gigabyte for pydantic and the templating to walk.
MAX_EXPANDED_CHARS = 16 * 1024 * 1024

_MERGE_TAG = "tag:yaml.org,2002:merge"

#: Text with more of ``[{-:?`` than this is parsed by the pure-Python loader only: every level
#: of nesting takes one of them, and libyaml's C recursion (no limit) must stay shallow. The
#: shipped playbook has ~270 (its embedded Python code counts too).
C_PARSER_MAX_INDICATORS = 1000
_INDICATORS = "[{-:?"
#: Where libyaml accepts what the pure-Python loader refuses, or reads it differently: a tab
#: as separating space (``k:<TAB>v``), ``?`` inside a plain scalar in a flow collection
#: (``[b?c]``), a byte-order mark inside the text. Text with any of them is not given to it.
_LIBYAML_LENIENT = "\t?\ufeff"
#: Two more: an empty value in a flow collection (``{x: }``), which libyaml marks one column
#: further, and a comment right after a block scalar's header (``|#``), which only it accepts.
_LIBYAML_DIFFERS = re.compile(r":\s*[,}\]]|[|>][-+0-9]*#")


def one_line(text: str) -> str:
    """``text`` with line breaks escaped: every message we emit must be a single line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _is_simple_key(key: str) -> bool:
    return (
        bool(key)
        and (key[0].isalpha() or key[0] == "_")
        and all(ch.isalnum() or ch in "_-" for ch in key)
    )


def format_path(path: KeyPath) -> str:
    """A key path for humans: ``steps[0].python_insert.class``; odd keys are quoted."""
    out = ""
    for item in path:
        if isinstance(item, int):
            out += f"[{item}]"
        elif _is_simple_key(item):
            out += f".{item}" if out else item
        else:
            quoted = '"' + one_line(item).replace('"', '\\"') + '"'
            out += f"[{quoted}]"
    return out


def path_item(key: Any) -> PathItem:
    """The path element for a mapping key: str and int as they are, anything else as str."""
    if isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool)):
        return key
    return str(key)


@dataclass(frozen=True)
class Positions:
    """Where each key and value of one YAML document is, by key path (1-based line, column)."""

    file: str
    values: dict[KeyPath, LineCol] = field(default_factory=dict)
    keys: dict[KeyPath, LineCol] = field(default_factory=dict)

    def nearest(self, path: KeyPath, *, prefer_key: bool = False) -> LineCol | None:
        """The position of ``path`` (its key if asked and known), else of its nearest ancestor."""
        if prefer_key and path in self.keys:
            return self.keys[path]
        for end in range(len(path), -1, -1):
            found = self.values.get(path[:end])
            if found is not None:
                return found
        return None

    def locate(self, path: KeyPath, *, prefer_key: bool = False) -> SourcePosition:
        """A `SourcePosition` for ``path``, naming the field as ``format_path`` writes it."""
        where = self.nearest(path, prefer_key=prefer_key)
        line, column = where if where is not None else (None, None)
        return SourcePosition(self.file, line, column, format_path(path))


@dataclass(frozen=True)
class YamlDocument:
    """A loaded YAML file: its top-level mapping and where everything in it is."""

    data: dict[str, Any]
    positions: Positions


class _NoDuplicates(yaml.constructor.SafeConstructor):
    """A safe constructor that refuses duplicate keys (YAML itself would keep the last
    silently) and remembers each key node's key; mixed into a parser by the loaders below."""

    file: str
    key_of: dict[int, Any]

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node, deep=False)
            if key in seen:
                first = seen[key].start_mark.line + 1
                mark = key_node.start_mark
                raise InputError(
                    one_line(f"duplicate key {key!r} (first defined on line {first})"),
                    SourcePosition(self.file, mark.line + 1, mark.column + 1),
                )
            seen[key] = key_node
        mapping = super().construct_mapping(node, deep=deep)
        # Remember each key node's constructed key (``1`` is an int, ``"1"`` a str) so that
        # positions can be keyed exactly like the data. Keys are cached, so this is cheap.
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=False)
            self.key_of[id(key_node)] = key
        return mapping


class _Loader(_NoDuplicates, yaml.SafeLoader):
    """The pure-Python loader: it words every error."""

    def __init__(self, stream: str, file: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self.file = file
        self.key_of = {}


_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)  # None without libyaml


class _CLoader(_NoDuplicates, _CSafeLoader or yaml.SafeLoader):  # type: ignore[misc]
    """libyaml's parser with our constructor: the fast path for text it accepts."""

    def __init__(self, stream: str, file: str) -> None:
        (_CSafeLoader or yaml.SafeLoader).__init__(self, stream)
        self.file = file
        self.key_of = {}


def _c_parser_fits(text: str) -> bool:
    """Whether libyaml may parse ``text`` first (see the module's notes)."""
    if _CSafeLoader is None or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return False
    if any(char in text for char in _LIBYAML_LENIENT) or _LIBYAML_DIFFERS.search(text):
        return False
    return sum(text.count(char) for char in _INDICATORS) <= C_PARSER_MAX_INDICATORS


def _syntax_error(file: str, text: str, exc: yaml.YAMLError) -> InputError:
    """One line from a PyYAML error: its problem (and context) at the problem's position."""
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line = before.count("\n") + 1
        column = exc.position - (before.rfind("\n") + 1) + 1
        message = f"character #x{exc.character:04x} is not allowed in YAML ({exc.reason})"
        return InputError(message, SourcePosition(file, line, column))
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        parts = [part for part in (exc.context, exc.problem) if part]
        started, ended = exc.context_mark, exc.problem_mark
        if exc.context and started is not None and ended is not None and started.line != ended.line:
            parts[0] += f" (started on line {started.line + 1})"
        message = "YAML syntax error: " + one_line(": ".join(parts) or "invalid YAML")
        if mark is None:
            return InputError(message, SourcePosition(file))
        return InputError(message, SourcePosition(file, mark.line + 1, mark.column + 1))
    return InputError("YAML error: " + one_line(str(exc)), SourcePosition(file))


def _expanded_size(
    node: Node, memo: dict[int, tuple[int, int]], ancestors: set[int]
) -> tuple[int, int]:
    """(nodes, scalar characters) ``node`` stands for once aliases are followed (linear, memoised).

    The walk stops adding children once either figure is past its limit, so a bomb costs no
    more than the limit to measure.
    """
    ident = id(node)
    if ident in memo:
        return memo[ident]
    if ident in ancestors:
        raise _RecursiveAlias(node)
    nodes, chars = 1, 0
    if isinstance(node, ScalarNode):
        chars = len(node.value)
    elif isinstance(node, SequenceNode | MappingNode):
        ancestors.add(ident)
        children: list[Node] = (
            list(node.value)
            if isinstance(node, SequenceNode)
            else [n for pair in node.value for n in pair]
        )
        for child in children:
            sub_nodes, sub_chars = _expanded_size(child, memo, ancestors)
            nodes, chars = nodes + sub_nodes, chars + sub_chars
            if nodes > MAX_EXPANDED_NODES or chars > MAX_EXPANDED_CHARS:
                break
        ancestors.discard(ident)
    memo[ident] = (nodes, chars)
    return nodes, chars


class _RecursiveAlias(Exception):
    """Internal: an alias refers to a node that contains it."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node


def _record(
    node: Node,
    data: Any,
    path: KeyPath,
    positions: Positions,
    key_of: dict[int, Any],
    seen: set[int],
) -> None:
    """Fill ``positions`` for ``node`` and, the first time a node is met, for its children.

    An aliased node is walked once only: later uses point at the anchored original, which is
    where the text to fix is anyway, and the walk stays linear.
    """
    positions.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, SequenceNode) and isinstance(data, list):
        for index, (child, item) in enumerate(zip(node.value, data, strict=False)):
            _record(child, item, (*path, index), positions, key_of, seen)
    elif isinstance(node, MappingNode) and isinstance(data, dict):
        for key_node, value_node in node.value:
            key = key_of.get(id(key_node), _MISSING)
            if key is _MISSING or key not in data:
                continue
            sub = (*path, path_item(key))
            mark = key_node.start_mark
            positions.keys[sub] = (mark.line + 1, mark.column + 1)
            _record(value_node, data[key], sub, positions, key_of, seen)


_MISSING: Any = object()


def load_yaml_text(text: str, file: str) -> YamlDocument:
    """Parse ``text`` (named ``file`` in errors) into a `YamlDocument`.

    Raises:
        InputError: syntax error, duplicate key, recursive alias or alias bomb, an empty
            document, or a top level that is not a mapping; always one line with file:line:col.
    """
    if _c_parser_fits(text):
        try:
            return _load(_CLoader, text, file)
        except Exception:  # any refusal is worded by the pure-Python loader below
            pass
    return _load(_Loader, text, file)


def _load(loader_class: type[_NoDuplicates], text: str, file: str) -> YamlDocument:
    """`load_yaml_text` with the given loader class."""
    loader: Any = None
    try:
        loader = loader_class(text, file)  # type: ignore[call-arg]
        node = loader.get_single_node()
        if node is None:
            raise InputError("the file is empty (expected a YAML mapping)", SourcePosition(file))
        try:
            nodes, chars = _expanded_size(node, {}, set())
        except _RecursiveAlias as rec:
            mark = rec.node.start_mark
            raise InputError(
                "an alias refers to a node that contains it (recursive data is not allowed)",
                SourcePosition(file, mark.line + 1, mark.column + 1),
            ) from None
        start = SourcePosition(file, node.start_mark.line + 1, node.start_mark.column + 1)
        if nodes > MAX_EXPANDED_NODES:
            raise InputError(
                f"the document expands to more than {MAX_EXPANDED_NODES} nodes through aliases",
                start,
            )
        if chars > MAX_EXPANDED_CHARS:
            limit = MAX_EXPANDED_CHARS // (1024 * 1024)
            raise InputError(
                f"the document expands to more than {limit} MiB of text through aliases", start
            )
        data = loader.construct_document(node)
        key_of = dict(loader.key_of)
    except yaml.YAMLError as exc:
        raise _syntax_error(file, text, exc) from None
    except RecursionError:
        raise InputError("the document is nested too deeply", SourcePosition(file)) from None
    except MemoryError:
        raise InputError("the document is too large to load", SourcePosition(file)) from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        kind = describe_type(data)
        mark = node.start_mark
        raise InputError(
            f"expected a mapping at the top level, got {kind}",
            SourcePosition(file, mark.line + 1, mark.column + 1),
        )
    positions = Positions(file)
    try:
        _record(node, data, (), positions, key_of, set())
    except RecursionError:
        raise InputError("the document is nested too deeply", SourcePosition(file)) from None
    return YamlDocument(data, positions)


def load_yaml(path: Path, *, display: str | None = None) -> YamlDocument:
    """Read and parse the YAML file at ``path``; errors name it as ``display`` (default: path).

    Raises:
        InputError: the file cannot be read or is not UTF-8, or anything `load_yaml_text` refuses.
    """
    file = display if display is not None else str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise InputError(f"cannot read the file: {reason}", SourcePosition(file)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        where = SourcePosition(file, line, column)
        raise InputError("the file is not valid UTF-8", where) from None
    return load_yaml_text(text, file)


def describe_type(value: Any) -> str:
    """``value``'s kind in words, for messages: 'a string', 'a list', 'a mapping', ..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"
