"""What every part of the stand-in shares: its configuration, SGLang's log lines, the stop flag.

Configuration, which SGLang's command line cannot carry (`launch_server` says what each key
does): `DEFAULTS`, overridden by ``standin.json`` beside this file, overridden by
``$SGLANG_STANDIN_<KEY>``. `STOP` is set by the SIGTERM/SIGINT handler and polled by the main
thread, the child watcher and each child process (its own copy there).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
MODEL_CLASS = "KimiK25ForConditionalGeneration"
EAGLE3_METHODS = ("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
READY_LINE = "The server is fired up and ready to roll!"
VERSION = "0.5.9-standin"
DEFAULTS: dict[str, Any] = {
    "load_seconds": 2.0,
    # Load time with EAGLE-3 (the draft model loads too); None: same as load_seconds.
    "eagle3_load_seconds": None,
    "warmup_seconds": 1.0,
    # /health and /health_generate generate one token and answer after SGLang's 1 s poll.
    "health_seconds": 1.0,
    # Without ignore_eos, the "model" ends a generation after this many tokens (None: never).
    "eos_after_tokens": None,
    "tokens_per_s": 50.0,
    "eagle3_tokens_per_s": 90.0,
    # Each request's tokens/s by how many run, "1:96.1,32:40" (standin_load); "": flat.
    "tokens_per_s_at": "",
    "eagle3_tokens_per_s_at": "",
    # EAGLE-3's accepted tokens per verify step; None: eagle3_tokens_per_s / tokens_per_s.
    "eagle3_accept_length": None,
    # A streamed answer sends an event at most this often (seconds).
    "stream_interval_s": 0.05,
    "orphan_scheduler": False,
    "die_after_ready_seconds": None,
    "gpu_state_dir": str(HERE.parent.parent / ".standin-gpu"),
    "gpu_memory_mib": 19600,
    "model_file": str(HERE / "srt" / "models" / "kimi_k25.py"),
    "bind_host": "",
    # A launcher that drops the speculative flags: the server runs (and /server_info reports)
    # without them, whatever its command line says.
    "drop_speculative": False,
}
_BOOLEANS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}
STOP = {"requested": False, "children": False}
_LOG_LOCK = threading.Lock()


def log(message: str, rank: str = "", stream: TextIO | None = None) -> None:
    """One log line the way SGLang prints it: ``[date time TP0] message``, flushed."""
    prefix = time.strftime("%Y-%m-%d %H:%M:%S") + (f" {rank}" if rank else "")
    with _LOG_LOCK:
        print(f"[{prefix}] {message}", file=stream or sys.stdout, flush=True)


def _coerce(key: str, value: Any) -> Any:
    default = DEFAULTS[key]
    if value is None or value == "":
        return default
    if isinstance(default, bool):
        if isinstance(value, bool) or str(value).lower() in _BOOLEANS:
            return value if isinstance(value, bool) else _BOOLEANS[str(value).lower()]
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return type(default if default is not None else 0.0)(value)  # str, int or float


def load_config() -> dict[str, Any]:
    """`DEFAULTS` < ``standin.json`` < environment, with types checked.

    Raises:
        ValueError: an unknown key in standin.json, or a value of the wrong type.
    """
    config = dict(DEFAULTS)
    path = HERE / "standin.json"
    if path.exists():
        from_file = json.loads(path.read_text())
        if set(from_file) - set(DEFAULTS):
            raise ValueError(f"{path}: unknown keys {sorted(set(from_file) - set(DEFAULTS))}")
        config.update(from_file)
    config["gpu_state_dir"] = os.environ.get("NVIDIA_SMI_STANDIN_STATE") or config["gpu_state_dir"]
    for key in DEFAULTS:
        config[key] = _coerce(key, os.environ.get(f"SGLANG_STANDIN_{key.upper()}", config[key]))
    return config


def request_stop(*_: object) -> None:
    """The SIGTERM/SIGINT handler: it only sets a flag, which the main thread polls."""
    STOP["requested"] = True


def wait_or_stop(seconds: float) -> bool:
    """Sleep ``seconds`` unless SIGTERM/SIGINT comes first; True if it did."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not STOP["requested"]:
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
    return STOP["requested"]
