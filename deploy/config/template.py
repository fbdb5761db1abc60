"""``{{ var }}`` templating of playbook and inventory values, with errors that say where.

Jinja2's sandboxed environment renders every string of a nested structure, mapping keys
included (``class_has: {"{{ model_class }}": [...]}``); non-strings pass through untouched.
Rendering always yields strings — a value written ``"{{ tp }}"`` becomes ``"8"`` — and the
pydantic models coerce them back where a field wants a number or a boolean
(``port: "{{ ssh_port }}"`` validates as ``2222``).

Variables may use other variables (``model_file: "{{ sglang_root }}/python/..."``). They are
resolved lazily, on first use, and each at most once per host: a variable nobody uses may
reference something undefined without failing the run (it may be meant for another
playbook), while one that is used and cannot be rendered is an error that names the string
where the undefined name is written. A cycle (``a: "{{ b }}"``, ``b: "{{ a }}"``) is reported
with its members in order.

Two deliberate departures from stock Jinja:

- Comments are ``{## ... ##}``, not ``{# ... #}``: shell commands say ``${#array[@]}`` and must
  not need escaping. ``{{`` and ``{%`` keep their meaning; literal braces (an f-string's
  ``{{x}}`` in inserted Python code) are written inside ``{% raw %}...{% endraw %}``.
- Strings without ``{{`` or ``{%`` are returned as they are, without going through Jinja, and
  strings whose every template is a bare ``{{ name }}`` of a defined variable (most of them)
  are rendered by substitution, with Jinja's result: Jinja itself (~20 ms to import, more to
  compile each template) is loaded only for a string that needs it — filters, expressions,
  blocks, or an error to word.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.config.errors import suggest
from deploy.config.yamlpos import (
    KeyPath,
    Positions,
    format_path,
    load_yaml,
    one_line,
    path_item,
)
from deploy.errors import InputError, SourcePosition

if TYPE_CHECKING:
    import jinja2


#: Longest string a template may render to. Values are paths, flags, code snippets: this is
#: far above any real one, and far below what exhausts memory (``a: "{{ big }}{{ big }}"``
#: doubled twenty times from a 1 MB ``big`` is a terabyte).
MAX_RENDERED_CHARS = 16 * 1024 * 1024


class TooLarge(Exception):
    """A template would produce more than `MAX_RENDERED_CHARS`."""


def _limit_message() -> str:
    return f"the value would be larger than {MAX_RENDERED_CHARS // (1024 * 1024)} MiB once rendered"


@functools.cache
def environment() -> jinja2.sandbox.SandboxedEnvironment:
    """The one Jinja environment, created on first need (see the module docstring)."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    class _Bounded(SandboxedEnvironment):
        """Refuses ``'x' * 10**9`` and ``9 ** 9 ** 9`` before computing them."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*":
                for seq, times in ((left, right), (right, left)):
                    sized = isinstance(seq, str | list | tuple) and isinstance(times, int)
                    if sized and len(seq) * times > MAX_RENDERED_CHARS:
                        raise TooLarge
            elif isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                bits = right * abs(left).bit_length()  # 9 ** 99999999 would take minutes
                if bits > 8 * MAX_RENDERED_CHARS:
                    raise TooLarge
            return super().call_binop(context, operator, left, right)

    env = _Bounded(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        comment_start_string="{##",
        comment_end_string="##}",
    )
    # ``{{ path | quote }}``: a value made safe as ONE shell word, for the few strings that are
    # shell commands by definition (a service's ``command``, ``verify_command.run``).
    env.filters["quote"] = lambda value: shlex.quote(str(value))
    return env


#: ``{{ name }}`` or ``{{ name | quote }}`` and nothing else between the braces.
_BARE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\|\s*quote\s*)?\}\}")
#: Names Jinja reads as literals or operators, never as variables.
_JINJA_WORDS = frozenset(
    {"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if"}
)


def fast_parts(source: str) -> list[str] | None:
    """``source`` split into literal text, variable name and filter (``""`` or ``"quote"``),
    in threes, text first and last, when every template in it is ``{{ name }}`` or
    ``{{ name | quote }}``; None when it needs Jinja.

    Jinja turns ``\\r\\n`` into ``\\n``, reads ``{%`` and ``{##`` as syntax, and lexes a brace
    next to ``{{``/``}}`` its own way (``{{{ a }}`` is a dict literal), so a string with any
    of those, or any other brace, is left to Jinja (tests/unit/test_config_template.py checks
    the equivalence on generated strings). ``quote`` is deploy's own filter
    (`environment`: ``shlex.quote(str(value))``), the one the playbooks' commands use, so
    they need no Jinja either (~40 ms of CPU to import and compile, every run).
    """
    if "{%" in source or "{##" in source or "\r" in source:
        return None
    parts = _BARE.split(source)
    texts = parts[0::3]
    if any("{" in text or "}" in text for text in texts) or any(
        name in _JINJA_WORDS for name in parts[1::3]
    ):
        return None
    parts[2::3] = ["quote" if filt else "" for filt in parts[2::3]]
    return parts


def bare_names(source: str) -> list[str] | None:
    """``source`` split into literal text and variable names (alternating, text first) when
    every template in it is a bare ``{{ name }}``; None otherwise (see `fast_parts`)."""
    parts = fast_parts(source)
    if parts is None or any(parts[2::3]):
        return None
    return [part for index, part in enumerate(parts) if index % 3 != 2]


def is_template(text: str) -> bool:
    """Whether ``text`` needs Jinja at all (the fast path skips it otherwise)."""
    return "{{" in text or "{%" in text


@dataclass(frozen=True)
class Origin:
    """Where a value was written, so that an error in it can name file:line and key path.

    Values from a YAML file carry that file's `Positions` and their key path; values from the
    command line carry a ``label`` such as ``-e`` instead.
    """

    positions: Positions | None
    path: KeyPath = ()
    label: str = ""
    is_key: bool = False  # the text is the mapping key at ``path``, not its value

    def child(self, *items: str | int) -> Origin:
        return Origin(self.positions, (*self.path, *items), self.label)

    def key(self) -> Origin:
        return Origin(self.positions, self.path, self.label, is_key=True)

    def locate(self) -> SourcePosition:
        if self.positions is None:
            return SourcePosition(self.label or "<command line>", field=format_path(self.path))
        return self.positions.locate(self.path, prefer_key=self.is_key)


#: Variables every template sees; they cannot be defined anywhere else.
BUILTIN_VARS = ("inventory_hostname", "playbook_dir")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EXTRA = SourcePosition("-e")


@functools.lru_cache(maxsize=4096)
def _compile(source: str) -> tuple[jinja2.Template, frozenset[str]]:
    """The compiled template and the names it reads from its context (cached: hosts share)."""
    from jinja2 import meta

    env = environment()
    tree = env.parse(source)
    names = frozenset(meta.find_undeclared_variables(tree))
    return env.from_string(tree), names


class Variables:
    """One host's variables: resolved on demand, each once, with cycle detection.

    ``values`` are the merged variables as written, ``origins`` where each was written.
    ``context`` is appended to every error message (e.g. `` (host gpu-1)``).
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        origins: Mapping[str, Origin],
        *,
        context: str = "",
    ) -> None:
        self._values = dict(values)
        self._origins = dict(origins)
        self._context = context
        self._resolved: dict[str, Any] = {}
        self._stack: list[str] = []

    @property
    def names(self) -> list[str]:
        return list(self._values)

    def get(self, name: str) -> Any:
        """The rendered value of variable ``name`` (which must exist).

        Raises:
            InputError: the value uses an undefined variable, has a template error, or is
                part of a cycle.
        """
        if name in self._resolved:
            return self._resolved[name]
        origin = self._origin(name)
        if name in self._stack:
            cycle = [*self._stack[self._stack.index(name) :], name]
            first = self._origin(cycle[0])
            raise InputError(f"variable cycle: {' -> '.join(cycle)}{self._context}", first.locate())
        self._stack.append(name)
        try:
            value = self.render(self._values[name], origin)
        finally:
            self._stack.pop()
        self._resolved[name] = value
        return value

    def resolved(self) -> dict[str, Any]:
        """Every variable rendered; one that cannot be rendered is kept as written.

        Such a variable is, by construction, used by nothing that was rendered (else that
        rendering failed first), so keeping its text is the honest thing to show.
        """
        out: dict[str, Any] = {}
        for name, raw in self._values.items():
            try:
                out[name] = self.get(name)
            except InputError:
                out[name] = raw
        return out

    def render(self, value: Any, origin: Origin) -> Any:
        """``value`` with every string in it rendered; ``origin`` says where it was written.

        Raises:
            InputError: at the position of the offending string.
        """
        if isinstance(value, str):
            return self.render_string(value, origin) if is_template(value) else value
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                sub = origin.child(path_item(key))
                name = key
                if isinstance(key, str) and is_template(key):  # class_has: {"{{ cls }}": [...]}
                    name = self.render_string(key, sub.key())
                    if name in value or name in out:
                        message = f"key {key!r} renders to {name!r}, which is already a key"
                        raise InputError(one_line(message + self._context), sub.key().locate())
                out[name] = self.render(item, sub)
            return out
        if isinstance(value, list):
            return [self.render(v, origin.child(i)) for i, v in enumerate(value)]
        return value

    def render_string(self, source: str, origin: Origin) -> str:
        """Render one template string; errors point at ``origin``."""
        parts = fast_parts(source)
        if parts is not None and all(name in self._values for name in parts[1::3]):
            # What Jinja would give (str() of each value, quoted by `quote`), without Jinja.
            pieces: list[str] = []
            for index in range(0, len(parts) - 1, 3):
                text, name, filt = parts[index : index + 3]
                value = str(self.get(name))
                pieces += [text, shlex.quote(value) if filt else value]
            pieces.append(parts[-1])
            if sum(map(len, pieces)) > MAX_RENDERED_CHARS:
                raise self._error(_limit_message(), source, None, origin)
            return "".join(pieces)
        import jinja2

        try:
            template, names = _compile(source)
        except jinja2.TemplateSyntaxError as exc:
            message = (
                f"template syntax error: {exc.message} (for literal {{{{ or {{%, wrap the text"
                " in {% raw %}...{% endraw %})"
            )
            raise self._error(message, source, exc.lineno, origin) from None
        context = {name: self.get(name) for name in names if name in self._values}
        try:
            rendered = template.render(context)
        except (TooLarge, MemoryError, OverflowError):
            raise self._error(_limit_message(), source, None, origin) from None
        except jinja2.UndefinedError as exc:
            missing = sorted(
                n for n in names if n not in context and n not in environment().globals
            )
            if missing:
                name = missing[0]
                hint = suggest(name, self._values) or f" (define it in vars or pass -e {name}=...)"
                message = f"undefined variable {name!r}{hint}"
            else:
                message = f"undefined value: {exc.message}"
            raise self._error(message, source, None, origin) from None
        except jinja2.TemplateError as exc:
            raise self._error(f"template error: {exc}", source, None, origin) from None
        except Exception as exc:  # user expressions can raise anything (1/0, 'a' + 1)
            message = f"template error: {type(exc).__name__}: {exc}"
            raise self._error(message, source, None, origin) from None
        if len(rendered) > MAX_RENDERED_CHARS:
            raise self._error(_limit_message(), source, None, origin)
        return rendered

    def _origin(self, name: str) -> Origin:
        return self._origins.get(name) or Origin(None, ("vars", name))

    def _error(self, message: str, source: str, lineno: int | None, origin: Origin) -> InputError:
        where = ""
        if lineno is not None and "\n" in source.rstrip("\n"):
            where = f" (line {lineno} of the value)"
        return InputError(one_line(message + where + self._context), origin.locate())


# --- where variables come from ----------------------------------------------------------


def check_var_names(names: Iterable[Any], where: Positions, base: KeyPath) -> None:
    """Refuse variable names a template cannot use, and the built-in ones.

    Raises:
        InputError: at the name's key in the file.
    """
    for name in names:
        position = where.locate((*base, name), prefer_key=True)
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(
                f"variable name {name!r} is not usable in templates (letters, digits, _)",
                position,
            )
        if name in BUILTIN_VARS:
            raise InputError(f"variable {name!r} is built in and cannot be set", position)


class ExtraVars(dict[str, Any]):
    """``-e`` variables: a plain dict that also remembers where each value was written."""

    def __init__(self) -> None:
        super().__init__()
        self.origins: dict[str, Origin] = {}


def parse_extra_vars(items: Sequence[str]) -> ExtraVars:
    """``-e NAME=VALUE`` and ``-e @FILE.yaml`` options, in order (a later one wins).

    Values after ``=`` stay strings, exactly as typed (``-e tp=8`` is ``"8"``; fields that
    want a number coerce it). ``@FILE`` loads a YAML mapping, with its types.

    Raises:
        InputError: an item that is neither form, a bad or built-in name, or a bad file.
    """
    out = ExtraVars()
    for item in items:
        if item.startswith("@"):
            path = Path(item[1:])
            if not path.is_file():
                raise InputError(f"extra vars file not found: {path}", _EXTRA)
            doc = load_yaml(path)
            check_var_names(doc.data, doc.positions, ())
            for name, value in doc.data.items():
                out[name] = value
                out.origins[name] = Origin(doc.positions, (name,))
            continue
        name, sep, value = item.partition("=")
        if not sep or not _NAME.match(name):
            raise InputError(f"expected NAME=VALUE or @FILE.yaml, got {item!r}", _EXTRA)
        if name in BUILTIN_VARS:
            raise InputError(f"variable {name!r} is built in and cannot be set", _EXTRA)
        out[name] = value
        out.origins[name] = Origin(None, (name,), label="-e")
    return out
