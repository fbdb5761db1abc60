"""Secrets are shown as ``***`` in everything deploy writes: one masking function for all outputs.

What counts as a secret:

- the value of a variable whose name has a word ending in ``token``, ``password``, ``passwd``,
  ``secret`` or ``key`` (any case, words split at ``_``, ``-`` and ``.``: ``hf_token``,
  ``DB_PASSWORD``, ``api-key``, ``apikey``), on by default. A count is not a secret:
  ``max_new_tokens`` and ``--speculative-num-draft-tokens`` stay readable, so a plan never
  hides the change it is about;
- the value of a variable listed in ``secret_vars:`` (playbook or inventory);
- the value of the environment variables named by a host's ``password_env`` and ``become_password_env``;
- a password or passphrase typed at deploy's prompt (``--ask-pass``, ``-K``, a key's passphrase);
- the value of a service ``env`` entry whose name is secret by the rules above;
- in any text, what follows ``NAME=`` for a secret-looking upper-case NAME (``HF_TOKEN=hf_...`` in a
  server's command line or environment we never registered, such as an adopted server's).

Values are collected while the configuration is resolved (`register`) and replaced wherever
they occur, also inside longer strings (``Bearer {{ hf_token }}``), at the output boundary:
the JSON report (so ``--json``, ``--report``, history and the webhook), the log file, the
terminal streams and rendered plan diffs. Masking there rather than at each producer means no
new message can forget it. Values shorter than 4 characters (`MIN_CHARS`) are not masked as
substrings: such a secret protects nothing, and masking ``8`` everywhere would garble every
report; the ``NAME=`` rule and ``-e NAME=VALUE`` on the command line still hide them.
Other service ``env`` values (``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES``) are shown: they are
paths and numbers that reports need; list one in ``secret_vars`` to hide it.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

MASK = "***"
#: Endings of a word of a variable's name that make its value a secret (case-insensitive).
SECRET_WORDS = ("token", "password", "passwd", "secret", "key")
#: Shortest value masked wherever it appears.
MIN_CHARS = 4

#: ``HF_TOKEN=value``: an environment assignment (upper case, as environments are written)
#: whose name is secret. Lower-case ``key=`` is left alone: it is Python (``sorted(key=len)``).
_NAME_VALUE = re.compile(
    r"(?<![A-Za-z0-9_])(?P<name>(?:[A-Z0-9]*_)*[A-Z0-9]*(?:"
    + "|".join(w.upper() for w in SECRET_WORDS)
    + r")(?:_[A-Z0-9_]*)?)(?P<sep>=)(?P<value>[^\s\"',;&|)]+)"
)
_WORDS = re.compile(r"[^a-z0-9]+")


def is_secret_name(name: str, listed: Iterable[str] = ()) -> bool:
    """Whether a variable called ``name`` holds a secret (by its name, or listed explicitly)."""
    return _secret_by_name(name) or name in set(listed)


@functools.lru_cache(maxsize=1024)
def _secret_by_name(name: str) -> bool:
    """The name rule alone, kept per name: every report asks it of the same few dozen keys
    (``summary``, ``diff``...) once per host and step."""
    words = _WORDS.split(name.lower())
    return any(w.endswith(SECRET_WORDS) for w in words)


class Masker:
    """The set of secret values of this process, and the replacement of them in text."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        #: The values as registered (``_values`` also holds their JSON-escaped forms).
        self._secrets: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: Any) -> None:
        """Remember ``value`` (and nested strings in it) as secret."""
        if isinstance(value, Mapping):
            for item in value.values():
                self.add(item)
            return
        if isinstance(value, list | tuple):
            for item in value:
                self.add(item)
            return
        if value is None or isinstance(value, bool):
            return
        text = str(value)
        if len(text) < MIN_CHARS:
            return
        forms = {text, json.dumps(text)[1:-1]}  # the escaped form inside a JSON string
        with self._lock:
            if forms <= self._values:
                return
            self._values |= forms
            self._secrets.add(text)
            longest_first = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, longest_first)))
            listeners = list(self._listeners)
        for listener in listeners:
            listener(text)

    def secrets(self) -> list[str]:
        """The values registered so far (for a worker process: `deploy.engine.workers`)."""
        with self._lock:
            return sorted(self._secrets)

    def on_add(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(value)`` for each value registered from now on (a worker process
        tells the run's process of a key it found on a host: the run's outputs mask it)."""
        with self._lock:
            self._listeners.append(listener)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._secrets.clear()
            self._pattern = None

    def mask(self, text: str) -> str:
        """``text`` with every known secret, and every ``SECRET_NAME=value``, as ``***``."""
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
        if "=" not in text:  # what `_NAME_VALUE` needs; most strings of a report have none
            return text
        return _NAME_VALUE.sub(_masked_pair, text)

    def mask_data(self, data: Any) -> Any:
        """A copy of JSON-like ``data`` with every string masked (mapping keys too)."""
        if isinstance(data, str):
            return self.mask(data)
        if isinstance(data, Mapping):  # {"HF_TOKEN": "..."}: a server's environment, say
            return {
                self.mask_data(k): MASK
                if isinstance(k, str) and isinstance(v, str) and v and is_secret_name(k)
                else self.mask_data(v)
                for k, v in data.items()
            }
        if isinstance(data, list | tuple):
            return [self.mask_data(item) for item in data]
        return data


def _masked_pair(match: re.Match[str]) -> str:
    if match.group("value") == MASK:
        return match.group(0)
    return f"{match.group('name')}{match.group('sep')}{MASK}"


#: The process's masker: configuration registers into it, every output goes through it.
MASKER = Masker()


def register(value: Any) -> None:
    """Treat ``value`` as a secret from now on, in every output of this process."""
    MASKER.add(value)


def register_vars(values: Mapping[str, Any], listed: Iterable[str] = ()) -> None:
    """Register the values of the variables in ``values`` that are secret by name or listing."""
    names = set(listed)
    for name, value in values.items():
        if is_secret_name(name, names):
            MASKER.add(value)


def register_env(name: str | None) -> None:
    """Register the value of environment variable ``name`` (``password_env``), if set."""
    if name:
        value = os.environ.get(name)
        if value:
            MASKER.add(value)


def mask(text: str) -> str:
    return MASKER.mask(text)


def mask_data(data: Any) -> Any:
    return MASKER.mask_data(data)


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line with ``-e NAME=VALUE`` values hidden when NAME is secret, then masked.

    The argv is written before the playbook is loaded, so only the name rule can apply to
    variables not yet registered.
    """
    out: list[str] = []
    for arg in argv:
        for prefix in ("--extra-vars=", "-e", ""):
            if arg.startswith(prefix) and "=" in arg[len(prefix) :]:
                name, _, value = arg[len(prefix) :].partition("=")
                if is_secret_name(name) and value:
                    arg = f"{prefix}{name}={MASK}"
                break
        out.append(MASKER.mask(arg))
    return out


class MaskedStream(io.TextIOBase):
    """A text stream that masks what is written to it, line by line, then passes it on.

    Whole lines are masked (a partial line waits for its newline or a flush), so a secret
    written in two pieces is still seen whole. No ``buffer`` attribute on purpose: click
    would write bytes to it, around the masking.
    """

    def __init__(self, inner: IO[str]) -> None:
        super().__init__()
        self._inner = inner
        self._pending = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8") or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def write(self, text: str) -> int:
        with self._lock:
            whole, newline, rest = (self._pending + text).rpartition("\n")
            self._pending = rest
            if newline:
                self._inner.write(MASKER.mask(whole + newline))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._inner.write(MASKER.mask(self._pending))
                self._pending = ""
        self._inner.flush()


def mask_terminal() -> None:
    """Route sys.stdout and sys.stderr through `MaskedStream` (once, at the CLI's start)."""
    if not isinstance(sys.stdout, MaskedStream):
        sys.stdout = MaskedStream(sys.stdout)
    if not isinstance(sys.stderr, MaskedStream):
        sys.stderr = MaskedStream(sys.stderr)
