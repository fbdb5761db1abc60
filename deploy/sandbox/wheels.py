"""The real `kimi_k25.py` files, read out of SGLang's wheels on PyPI and cached on this machine.

Tests, the demo and the benchmark patch the file SGLang really ships, never a copy kept in this
repository (its licence and its exact bytes are SGLang's). A wheel is downloaded once with
``pip download --no-deps`` into the cache; only the one member is read out of the zip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

KIMI_MEMBER = "sglang/srt/models/kimi_k25.py"

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
