"""Switches that turn one speed mechanism off, for the bench's ablation only.

``DEPLOY_ABLATE=name,name`` in the environment (`python -m bench --ablate` sets it per run;
not an option for users) turns off each mechanism named, so that the bench can time a run
without it against the same run with everything on, in the same rounds (DESIGN.md, "Speed,
and what it may cost": a mechanism that buys neither 5 % nor a round trip anywhere is
removed). Read once, at import: a run never changes its mind half-way.
"""

from __future__ import annotations

import os

#: Every switch, with what turning it off does.
MECHANISMS = {
    "quickack": "no TCP_QUICKACK after sshd's hostkeys notice (deploy.remote.connect.Wire)",
    "compression": "no delayed zlib compression (deploy.remote.connect.Wire)",
    "readahead": "no file reads or compile checks sent with the lock's exec",
    "dial": "no TCP connects ahead of the SSH stack's import (deploy.remote.dial)",
    "splice": "every write sends its whole file, saved copies too (deploy.remote.hostfiles)",
}

_ENV = "DEPLOY_ABLATE"
OFF = frozenset(name for name in os.environ.get(_ENV, "").split(",") if name)


def off(name: str) -> bool:
    """Whether the bench turned mechanism ``name`` (a key of `MECHANISMS`) off for this run."""
    assert name in MECHANISMS, name
    return name in OFF
