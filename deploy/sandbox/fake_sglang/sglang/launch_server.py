"""Stand-in for ``python -m sglang.launch_server``: SGLang's start-up, API and failures, no GPU.

SGLang needs GPUs, yet the restart step must be proven against a server that starts, fails and
stops the way SGLang does. Copied over ``<root>/sglang/python/sglang/`` beside SGLang's real
``srt/models/kimi_k25.py``, the real command line starts this instead:
``PYTHONPATH=<root>/sglang/python python -m sglang.launch_server --model-path M --port 30000``.

Like SGLang 0.5.9 (DESIGN.md, "SGLang facts"): the command line is 0.5.9's argparse
(`standin_args`: an unknown flag, a lower-case ``eagle3`` or an ambiguous prefix exits 2 with
argparse's message). The port stays unbound while "loading" (connection refused), then
``/health`` answers 503 at once while warming up, and 200 once "The server is fired up and ready
to roll!" is logged, about a second after the request (``health_seconds``: SGLang generates a
token and looks for it every second). With ``--speculative-algorithm``, a draft model path
that is neither a directory with a ``config.json`` nor a Hugging Face repo id fails the start
after the target model has loaded, with transformers' OSError (exit 1). The model file must
compile (else a SyntaxError traceback, exit 1); with ``--speculative-algorithm EAGLE3`` its
class must define the three EAGLE-3 methods *in its body*, else the server dies after the load
with SGLang's AttributeError (exit 1). A port still held when the load ends fails the start
only then (exit 1). Children
``sglang::scheduler_TP<rank>`` (one per ``--tp`` rank, on GPU ``rank``) register in the GPU
state dir the fake ``nvidia-smi`` reads; they and ``sglang::detokenizer`` exit with their
parent, unless ``orphan_scheduler``: then schedulers ignore SIGTERM, outlive it and keep its
listening socket open (sent over a socketpair once bound) until SIGKILLed. Otherwise the
children have no SIGTERM handler (SIGTERM to the process group kills them at once), and a child
that dies makes the main process kill the tree, itself included ("Received sigquit from a child
process"): requests in flight are cut off. SIGTERM or SIGINT to the main process alone:
health 503, new requests still admitted (0.5.9's ``/generate`` does not look at its exiting
flag), and once none is in flight (however long that takes, as SGLang's ``sigterm_watchdog``
waits) the children stop, exit 0. ``GET /get_load`` says how many requests run. ``--host`` is where the
server binds (IPv4 or IPv6); ``bind_host`` overrides it (a launcher that drops the flag);
``drop_speculative`` drops the speculative flags the same way. With ``--api-key``, everything
but ``/health*`` and ``/metrics`` wants ``Authorization: Bearer KEY`` (401 without).
``die_after_ready_seconds``: a scheduler "crash", then the whole tree is SIGKILLed as SGLang's
``kill_process_tree`` does (exit status -9). ``POST /generate`` sleeps ``tokens / speed`` per
request, concurrently, like a batching server, and reports those tokens in
``meta_info.completion_tokens``: ``max_new_tokens``, or fewer when ``eos_after_tokens`` is set
and the request has no ``ignore_eos`` (the "model" then stops at an end-of-sequence token). ``speed`` is ``tokens_per_s``, or
``eagle3_tokens_per_s`` with EAGLE-3, so a test sets each configuration's throughput and a
client measures it (e.g. 75 and 54.1 tok/s, the EAGLE-3 regression the gate must catch).
A speed that depends on how many requests run, ``"stream": true``, ``spec_accept_length``
and ``/v1/loads``: `standin_load`.

Configuration, which SGLang's command line cannot carry: `standin_config.DEFAULTS`, overridden by
``standin.json`` beside this file, overridden by ``$SGLANG_STANDIN_<KEY>`` (for instance
``SGLANG_STANDIN_LOAD_SECONDS=0.5``). ``gpu_state_dir`` also honours ``$NVIDIA_SMI_STANDIN_STATE``
(the fake nvidia-smi's variable) below its own; both default to ``<root>/sglang/.standin-gpu``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .standin_args import parse_args
from .standin_children import Child, spawn_children, stop_children, watch_children
from .standin_config import MODEL_CLASS, READY_LINE, load_config, log, request_stop, wait_or_stop
from .standin_failures import draft_failure, eagle3_failure, import_failure
from .standin_http import Standin


def main(argv: list[str] | None = None) -> int:
    """Start, serve and stop like ``sglang.launch_server``; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)  # exit 2 on a bad flag, as 0.5.9
    try:
        config = load_config()
    except (ValueError, TypeError) as error:
        print(f"sglang stand-in: bad configuration: {error}", file=sys.stderr, flush=True)
        return 2
    if config["drop_speculative"]:  # a launcher that does not pass them on
        args.speculative_algorithm = args.speculative_draft_model_path = None
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in vars(args).items()) + ")")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    children = spawn_children(args, config)
    threading.Thread(target=watch_children, args=(children, config), daemon=True).start()
    try:
        return serve(args, config, children)
    finally:
        stop_children(children, config["orphan_scheduler"])


def fail(message: str, children: list[Child], config: dict[str, Any]) -> int:
    """A scheduler died: its traceback on stderr, the children killed, exit status 1."""
    log(f"Scheduler hit an exception: {message}", "TP0", sys.stderr)
    log(
        "Received sigquit from a child process. It usually means the child failed.",
        stream=sys.stderr,
    )
    stop_children(children, config["orphan_scheduler"], kill=True)
    return 1


def serve(args: argparse.Namespace, config: dict[str, Any], children: list[Child]) -> int:
    """Load, bind, warm up and serve until told to stop; returns the exit status."""
    model_file, load = Path(config["model_file"]), float(config["load_seconds"])
    eagle3 = args.speculative_algorithm == "EAGLE3"
    if eagle3 and config.get("eagle3_load_seconds") is not None:
        load = float(config["eagle3_load_seconds"])
    log("Load weight begin. avail mem=94.61 GB", "TP0")
    failure = import_failure(model_file)
    if failure is not None:
        return fail(failure, children, config)
    if wait_or_stop(load * 0.8):
        return 0
    log(
        f"Load weight end. type={MODEL_CLASS}, dtype=torch.bfloat16, avail mem=75.48 GB, "
        f"mem usage={config['gpu_memory_mib'] / 1024:.2f} GB.",
        "TP0",
    )
    if args.speculative_algorithm:
        failure = draft_failure(args.speculative_draft_model_path)
        if failure is not None:
            return fail(failure, children, config)
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=74.91 GB", "TP0")
    if wait_or_stop(load * 0.2):
        return 0
    log(f"Capture cuda graph end. Time elapsed: {load * 0.2:.2f} s. mem usage=0.57 GB.", "TP0")
    if eagle3:
        failure = eagle3_failure(model_file)
        if failure is not None:
            return fail(failure, children, config)
    try:
        server = Standin(args, config)
    except OSError as error:
        log(
            f"ERROR:    [Errno {error.errno}] error while attempting to bind on address "
            f"({args.host!r}, {args.port}): {(error.strerror or '').lower()}",
            stream=sys.stderr,
        )
        return 1
    for child in children:
        if child.channel:
            with contextlib.suppress(OSError):
                socket.send_fds(child.channel, [b"L"], [server.fileno()])
    host = config.get("bind_host") or args.host
    log(f"INFO:     Uvicorn running on http://{host}:{args.port} (Press CTRL+C to quit)")
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        if not wait_or_stop(float(config["warmup_seconds"])):
            server.phase = "ready"
            log(READY_LINE)
            die_after = config["die_after_ready_seconds"]
            if not wait_or_stop(float("inf") if die_after is None else die_after):
                fail(
                    "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error: an "
                    "illegal memory access was encountered",
                    children,
                    config,
                )
                os.kill(os.getpid(), signal.SIGKILL)
        server.phase = "draining"
        log(f"Gracefully exiting... Remaining number of requests: {server.inflight}.")
        last = time.monotonic()
        while server.inflight:  # like SGLang's sigterm_watchdog: no deadline of its own
            if time.monotonic() - last >= 5:
                log(f"Gracefully exiting... Remaining number of requests: {server.inflight}.")
                last = time.monotonic()
            time.sleep(0.02)
        return 0
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
