"""A stand-in for the ``sglang`` package: only ``python -m sglang.launch_server`` exists.

Copied over an SGLang checkout's ``python/sglang/`` on sandbox hosts; see `launch_server`.
"""

__version__ = "0.5.9-standin"
