"""A stand-in for the ``sglang`` package: only ``python -m sglang.launch_server`` exists.

Copied over an SGLang checkout's ``python/sglang/`` on sandbox hosts; see `launch_server`.
"""

__version__ = "0.5.9-standin"

# SGLang's dependencies (torch, transformers, sglang.srt internals) as stubs, found only when
# nothing on disk is: the real kimi_k25.py imports here as on a GPU host (`standin_stubs`).
from .standin_stubs import install as _install_stubs

_install_stubs()
