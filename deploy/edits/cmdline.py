"""A server's command line and environment, read the way SGLang reads them, and changed as declared.

A restart keeps the operator's server: its own argv (``--host 0.0.0.0``, memory fractions, a
served model name) and environment (tokens, ``CUDA_VISIBLE_DEVICES``, a venv's ``PATH``), with
only the playbook's declared changes applied. To know whether a running server already has a
flag, the argv is read as SGLang's ``argparse`` reads it:

- ``--x=y`` is ``--x y``;
- aliases are one flag (``--tp-size`` / ``--tensor-parallel-size``, ``--model`` / ``--model-path``);
- an unambiguous prefix is the flag it abbreviates (argparse's ``allow_abbrev``, on in SGLang):
  ``--tp`` is ``--tp-size``. `KNOWN_FLAGS` is a subset of SGLang's flags, which is enough: an argv
  that SGLang accepted has no ambiguous abbreviation, so a prefix matching exactly one flag here
  can only mean that flag; a prefix matching none is kept as written;
- a flag owns the tokens after it up to the next flag (store_true flags own none; ``nargs='+'``
  flags own several); a repeated flag keeps every occurrence, in order.

Pure functions, no I/O: the restart step fetches the running process's argv/env/cwd (one exec of
the host-side helper) and applies what these compute.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from deploy.masking import is_secret_name

#: Alias groups of SGLang 0.5.9's server_args.py: every spelling -> the name used here.
ALIASES: dict[str, str] = {
    "--model": "--model-path",
    "--tensor-parallel-size": "--tp-size",
    "--pipeline-parallel-size": "--pp-size",
    "--data-parallel-size": "--dp-size",
    "--expert-parallel-size": "--ep-size",
    "--ep": "--ep-size",
    "--attention-context-parallel-size": "--attn-cp-size",
    "--moe-data-parallel-size": "--moe-dp-size",
    "--nccl-init-addr": "--dist-init-addr",
    "--speculative-draft-model": "--speculative-draft-model-path",
}

#: Option strings of SGLang 0.5.9 that playbooks and operators commonly use (a subset: see the
#: module docstring for why a subset is enough for prefix matching).
KNOWN_FLAGS: frozenset[str] = frozenset(
    {
        *ALIASES,
        *ALIASES.values(),
        "--tokenizer-path",
        "--tokenizer-mode",
        "--host",
        "--port",
        "--trust-remote-code",
        "--mem-fraction-static",
        "--served-model-name",
        "--context-length",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--max-total-tokens",
        "--kv-cache-dtype",
        "--quantization",
        "--dtype",
        "--attention-backend",
        "--cuda-graph-max-bs",
        "--cuda-graph-bs",
        "--disable-cuda-graph",
        "--enable-metrics",
        "--log-level",
        "--api-key",
        "--nnodes",
        "--node-rank",
        "--tool-call-parser",
        "--reasoning-parser",
        "--random-seed",
        "--speculative-algorithm",
        "--speculative-draft-model-revision",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
    }
)

#: What a secret-looking value (`is_secret`) is shown as in plans, reports and logs.
MASK = "***"

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def is_flag(token: str) -> bool:
    """Whether ``token`` starts an option (``-1`` and ``-0.5`` are values, as in argparse)."""
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def canonical(option: str, known: Iterable[str] = KNOWN_FLAGS) -> str:
    """The one name of an option string: exact, then alias, then unambiguous prefix."""
    table = frozenset(known)
    if option in table:
        return ALIASES.get(option, option)
    if option.startswith("--"):
        matches = {ALIASES.get(flag, flag) for flag in table if flag.startswith(option)}
        if len(matches) == 1:
            return matches.pop()
    return option


@dataclass(frozen=True)
class Flag:
    """One occurrence of an option: its canonical name, the tokens as written, its values."""

    name: str
    tokens: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """What argparse makes of it (spelling aside)."""
        return self.name, self.values


@dataclass(frozen=True)
class Command:
    """An argv split into the program part (interpreter, ``-m module``) and its flags."""

    program: tuple[str, ...]
    flags: tuple[Flag, ...]

    def argv(self) -> list[str]:
        return [*self.program, *(token for flag in self.flags for token in flag.tokens)]

    def normal(self) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
        """Compared to decide whether two command lines start the same server."""
        return self.program, tuple(flag.key for flag in self.flags)

    def values(self, name: str) -> tuple[str, ...] | None:
        """The values of the last occurrence of ``name`` (argparse's "store": last wins)."""
        found = [flag for flag in self.flags if flag.name == canonical(name)]
        return found[-1].values if found else None


def parse(argv: Sequence[str], match: str = "") -> Command:
    """Split ``argv`` after ``match`` (e.g. ``sglang.launch_server``), else after argv[0].

    Tokens between the program and the first flag stay with the program (a positional
    argument of a wrapper script, say).
    """
    tokens = list(argv)
    start = 1
    if match:
        start = next((i + 1 for i, token in enumerate(tokens) if match in token), 1)
    while start < len(tokens) and not is_flag(tokens[start]):
        start += 1
    program = tuple(tokens[:start])
    flags: list[Flag] = []
    i = start
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("--") and "=" in token:
            option, _, value = token.partition("=")
            flags.append(Flag(canonical(option), (token,), (value,)))
            continue
        values = []
        while i < len(tokens) and not is_flag(tokens[i]):
            values.append(tokens[i])
            i += 1
        flags.append(Flag(canonical(token), (token, *values), tuple(values)))
    return Command(program, tuple(flags))


ArgValue = str | int | float | bool | list[str | int | float] | None


def _values(value: ArgValue) -> tuple[str, ...] | None:
    """A declared value as argv tokens: true is a bare flag, false/null removes it."""
    if value is True:
        return ()
    if value is False or value is None:
        return None
    if isinstance(value, list):
        return tuple(str(item) for item in value)
    return (str(value),)


def apply_args(
    command: Command, set_: Mapping[str, ArgValue], remove: Iterable[str] = ()
) -> Command:
    """``command`` with flags removed, then set: a set flag replaces every occurrence, at the
    place of the first; a new one goes at the end. Untouched flags keep their spelling."""
    drop = {canonical(name) for name in remove}
    wanted: dict[str, tuple[str, ...] | None] = {}
    for name, value in set_.items():
        wanted[canonical(name)] = _values(value)
    drop |= {name for name, values in wanted.items() if values is None}
    flags: list[Flag] = []
    placed: set[str] = set()
    for flag in command.flags:
        if flag.name in drop:
            continue
        values = wanted.get(flag.name)
        if values is None:
            flags.append(flag)
        elif flag.name not in placed:
            flags.append(Flag(flag.name, (flag.name, *values), values))
            placed.add(flag.name)
    for name, values in wanted.items():
        if values is not None and name not in placed:
            flags.append(Flag(name, (name, *values), values))
    return Command(command.program, tuple(flags))


def derive_argv(
    argv: Sequence[str],
    set_: Mapping[str, ArgValue],
    remove: Iterable[str] = (),
    match: str = "",
) -> list[str]:
    """The running server's argv with the declared changes applied."""
    return apply_args(parse(argv, match), set_, remove).argv()


def same_argv(left: Sequence[str], right: Sequence[str], match: str = "") -> bool:
    """Whether both start the same server as SGLang reads them (``--tp 2`` = ``--tp-size=2``)."""
    return parse(left, match).normal() == parse(right, match).normal()


def derive_env(
    env: Mapping[str, str], set_: Mapping[str, str], unset: Iterable[str] = ()
) -> dict[str, str]:
    """``env`` minus ``unset`` plus ``set_``; an empty value in ``set_`` changes nothing.

    Templated values render to "" when a variable is left at its empty default; setting the
    variable to "" would wipe what the server inherited (a PYTHONPATH that makes sglang
    importable), so an empty value means "leave it as it is".
    """
    out = {key: value for key, value in env.items() if key not in set(unset)}
    out.update({key: value for key, value in set_.items() if value != ""})
    return out


def is_secret(name: str) -> bool:
    """Whether a flag's or a variable's value is secret-looking (`deploy.masking`'s rule)."""
    return is_secret_name(name)


def masked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret-looking flags (``--api-key X``, ``--hf-token=X``)
    as ``***``, for messages."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next and not is_flag(token):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = token.partition("=")
        secret = token.startswith("--") and is_secret(name.lstrip("-"))
        if secret and eq:
            out.append(f"{name}={MASK}")
        else:
            out.append(token)
            hide_next = secret
    return out


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    return {key: MASK if is_secret(key) else value for key, value in env.items()}


def _argv_lines(argv: Sequence[str], match: str) -> list[str]:
    command = parse(argv, match)
    lines = [shlex.join(command.program)]
    for flag in command.flags:
        if is_secret(flag.name.lstrip("-")) and flag.values:  # --api-key sk-...
            lines.append(f"  {flag.name} {MASK}")
        else:
            lines.append("  " + shlex.join(flag.tokens))
    return lines


def describe_change(
    old_argv: Sequence[str],
    new_argv: Sequence[str],
    old_env: Mapping[str, str],
    new_env: Mapping[str, str],
    *,
    match: str = "",
    label: str = "server",
) -> str:
    """A unified diff of the command line (one flag a line) and of the environment (one
    variable a line, sorted); values of secret-looking flags (``--api-key``) and variables
    (``HF_TOKEN``) show as ``***``; "" when nothing differs."""
    old_lines = _argv_lines(old_argv, match) if old_argv else []
    new_lines = _argv_lines(new_argv, match)
    old_vars = [f"{k}={v}" for k, v in sorted(masked_env(old_env).items())]
    new_vars = [f"{k}={v}" for k, v in sorted(masked_env(new_env).items())]
    # A secret whose value changed shows as changed, though both sides read ***.
    for key in sorted(set(old_env) & set(new_env)):
        if is_secret(key) and old_env[key] != new_env[key]:
            old_vars[old_vars.index(f"{key}={MASK}")] = f"{key}={MASK} (old value)"
            new_vars[new_vars.index(f"{key}={MASK}")] = f"{key}={MASK} (new value)"
    out: list[str] = []
    for kind, old, new in (
        ("command line", old_lines, new_lines),
        ("environment", old_vars, new_vars),
    ):
        if old == new:
            if old and out:
                out.append(f"({label} {kind} unchanged: {len(old)} entries kept)\n")
            continue
        out.extend(
            line + "\n"
            for line in difflib.unified_diff(
                old,
                new,
                f"{label} {kind} (running)",
                f"{label} {kind} (new)",
                lineterm="",
                n=max(len(old), len(new)),
            )
        )
    return "".join(out)
