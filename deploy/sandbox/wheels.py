"""The real `kimi_k25.py` files, read out of SGLang's wheels on PyPI and cached on this machine.

Tests, the demo and the benchmark patch the file SGLang really ships, never a copy kept in this
repository (its licence and its exact bytes are SGLang's). A wheel is downloaded once with
``pip download --no-deps`` into the cache; only the one member is read out of the zip.

`server_flags` reads SGLang's command-line interface out of the same wheel (the option strings
of ``ServerArgs.add_cli_args`` and how many values each takes), so that the stand-in server
accepts, abbreviates and refuses flags exactly as that release's argparse does.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

KIMI_MEMBER = "sglang/srt/models/kimi_k25.py"
SERVER_ARGS_MEMBER = "sglang/srt/server_args.py"
#: The release whose command line the stand-in mirrors.
STANDIN_RELEASE = "0.5.9"
SWITCH_ACTIONS = ("store_true", "store_false", "store_const", "count")

#: 0.5.9 lacks the EAGLE-3 methods (needs the patch); 0.5.10 ships them (a re-run is a no-op).
PATCH_NEEDED = "0.5.9"
ALREADY_PATCHED = "0.5.10"


def cache_dir() -> Path:
    """``$DEPLOY_WHEEL_CACHE``, else ``$XDG_CACHE_HOME/deploy/wheels`` (``~/.cache/...``)."""
    explicit = os.environ.get("DEPLOY_WHEEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "deploy" / "wheels"


def sglang_wheel(version: str) -> Path:
    """The path of ``sglang-VERSION-py3-none-any.whl``, downloading it the first time.

    Raises:
        RuntimeError: pip could not download it (no network to PyPI, unknown version).
    """
    directory = cache_dir()
    wheel = directory / f"sglang-{version}-py3-none-any.whl"
    if wheel.exists():
        return wheel
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(directory),
            f"sglang=={version}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not wheel.exists():
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"could not download sglang=={version} with pip: {tail[0]}")
    return wheel


def kimi_k25_source(version: str) -> bytes:
    """The exact bytes of ``sglang/srt/models/kimi_k25.py`` in SGLang ``version``'s wheel.

    Raises:
        KeyError: that version's wheel has no such file (0.5.8 and older).
    """
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        return wheel.read(KIMI_MEMBER)


def server_flags(version: str = STANDIN_RELEASE) -> list[dict[str, object]]:
    """SGLang ``version``'s server options: ``{"names": [...], "nargs": N}`` per option.

    Read from the ``add_argument`` calls of ``ServerArgs.add_cli_args`` (by ``ast``; nothing
    is imported or run). ``nargs`` is 0 for a switch (``store_true``/``store_false``/``store_const``),
    ``"?"``, ``"*"`` or ``"+"`` where given (SGLang's ``DeprecatedAction`` takes none), else 1. Defaults, types and choices are not kept:
    the stand-in declares the options it acts on itself, exactly, and only needs the others so
    that they are accepted and so that abbreviations are ambiguous where SGLang's are.
    """
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:
        tree = ast.parse(wheel.read(SERVER_ARGS_MEMBER))
    adder = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args"
    )
    flags: list[dict[str, object]] = []
    for call in ast.walk(adder):
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if not names or not all(isinstance(n, str) and n.startswith("-") for n in names):
            continue
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        action, nargs = keywords.get("action"), keywords.get("nargs")
        count: object = 1
        if isinstance(nargs, ast.Constant):
            count = nargs.value
        elif (isinstance(action, ast.Constant) and action.value in SWITCH_ACTIONS) or (
            isinstance(action, ast.Name) and action.id == "DeprecatedAction"  # its nargs=0
        ):
            count = 0
        flags.append({"names": names, "nargs": count})
    return flags
