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
health 503, new requests refused, in-flight requests finish (however long they take, as
SGLang's ``sigterm_watchdog`` waits), then the children stop, exit 0. ``--host`` is where the
server binds (IPv4 or IPv6); ``bind_host`` overrides it (a launcher that drops the flag).
``die_after_ready_seconds``: a scheduler "crash", then the whole tree is SIGKILLed as SGLang's
``kill_process_tree`` does (exit status -9). ``POST /generate`` sleeps ``tokens / speed`` per
request, concurrently, like a batching server, and reports those tokens in
``meta_info.completion_tokens``: ``max_new_tokens``, or fewer when ``eos_after_tokens`` is set
and the request has no ``ignore_eos`` (the "model" then stops at an end-of-sequence token). ``speed`` is ``tokens_per_s``, or
``eagle3_tokens_per_s`` with EAGLE-3, so a test sets each configuration's throughput and a
client measures it (e.g. 75 and 54.1 tok/s, the EAGLE-3 regression the gate must catch).

Configuration, which SGLang's command line cannot carry: `DEFAULTS`, overridden by
``standin.json`` beside this file, overridden by ``$SGLANG_STANDIN_<KEY>`` (for instance
``SGLANG_STANDIN_LOAD_SECONDS=0.5``). ``gpu_state_dir`` also honours ``$NVIDIA_SMI_STANDIN_STATE``
(the fake nvidia-smi's variable) below its own; both default to ``<root>/sglang/.standin-gpu``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from .standin_args import parse_args

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
    "orphan_scheduler": False,
    "die_after_ready_seconds": None,
    "gpu_state_dir": str(HERE.parent.parent / ".standin-gpu"),
    "gpu_memory_mib": 19600,
    "model_file": str(HERE / "srt" / "models" / "kimi_k25.py"),
    "bind_host": "",
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
#: Children run this rather than this file, so ``pgrep -f launch_server`` misses them, as it
#: misses SGLang's (a reason to stop the server by process group).
BOOTSTRAP = (
    "import json,os,sys;c=json.loads(os.environ.pop('_SGLANG_STANDIN_CHILD'));"
    "sys.path.insert(0,c['path']);__import__(c['module'],fromlist=['x'])._child_main(c)"
)
_STOP = {"requested": False, "children": False}
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


def _request_stop(*_: object) -> None:
    """The SIGTERM/SIGINT handler: it only sets a flag, which the main thread polls."""
    _STOP["requested"] = True


def wait_or_stop(seconds: float) -> bool:
    """Sleep ``seconds`` unless SIGTERM/SIGINT comes first; True if it did."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not _STOP["requested"]:
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
    return _STOP["requested"]


# --- what the model file does to start-up ------------------------------------------------------

#: (file, line, function, code) of 0.5.9's frames on the way to each failure.
_FRAMES = {
    "head": [
        ("srt/managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
        ("srt/managers/scheduler.py", 368, "__init__", "self.init_model_worker()"),
    ],
    "import": [
        (
            "srt/models/registry.py",
            96,
            "import_model_classes",
            "module = importlib.import_module(name)",
        )
    ],
    "target": [
        (
            "srt/managers/tp_worker.py",
            330,
            "_init_model_runner",
            "self._model_runner = ModelRunner(",
        ),
        ("srt/model_executor/model_runner.py", 622, "initialize", "self.model.{method}("),
    ],
    "draft": [
        (
            "srt/speculative/eagle_worker.py",
            157,
            "__init__",
            "embed, head = self.target_worker.model_runner.model.{method}()",
        )
    ],
    "draft_load": [
        (
            "srt/managers/scheduler.py",
            520,
            "maybe_init_draft_worker",
            "self.draft_worker = DraftWorkerClass(",
        ),
        ("srt/speculative/eagle_worker.py", 120, "__init__", "super().__init__("),
        ("srt/configs/model_config.py", 240, "from_server_args", "return ModelConfig("),
        (
            "srt/utils/hf_transformers_utils.py",
            250,
            "get_config",
            "config = AutoConfig.from_pretrained(",
        ),
    ],
    "torch": [
        (
            "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py",
            1940,
            "__getattr__",
            "raise AttributeError(",
        )
    ],
}


def sglang_traceback(keys: list[str], last: str, method: str = "") -> str:
    """A traceback through SGLang's own files, ending in ``last``."""
    lines = ["Traceback (most recent call last):"]
    for file, line, function, code in (frame for key in keys for frame in _FRAMES[key]):
        lines += [
            f'  File "{HERE / file}", line {line}, in {function}',
            f"    {code.format(method=method)}",
        ]
    return "\n".join(lines) + "\n" + last.rstrip("\n")


def import_failure(model_file: Path) -> str | None:
    """The traceback of importing ``model_file`` when that fails (missing, or not compiling)."""
    if not model_file.exists():
        return sglang_traceback(
            ["head"],
            f"ValueError: Model architectures ['{MODEL_CLASS}'] "
            f"are not supported for now ({model_file} is missing).",
        )
    try:
        compile(model_file.read_bytes(), str(model_file), "exec")
    except SyntaxError as error:
        return sglang_traceback(["head", "import"], "".join(traceback.format_exception_only(error)))
    return None


def eagle3_failure(model_file: Path) -> str | None:
    """The AttributeError traceback if the class body lacks an EAGLE-3 method, else None.

    Only the class body counts: methods appended at module level after ``EntryClass`` (the
    ``cat >>`` mistake) leave the file compiling and the server dying exactly like this.
    """
    defined = {
        member.name
        for node in ast.parse(model_file.read_bytes()).body
        if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS
        for member in node.body
        if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    missing = [name for name in EAGLE3_METHODS if name not in defined]
    if not missing:
        return None
    path = "target" if missing[0] == EAGLE3_METHODS[0] else "draft"  # who calls it first
    return sglang_traceback(
        ["head", path, "torch"],
        f"AttributeError: '{MODEL_CLASS}' object has no attribute '{missing[0]}'",
        missing[0],
    )


#: What huggingface_hub accepts as a repo id (validate_repo_id), so transformers looks it up.
_REPO_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]+\b$")


def draft_failure(draft: str | None) -> str | None:
    """The traceback of loading the draft model, as 0.5.9's EAGLE worker does, if it fails.

    Like transformers: an existing directory is a local model and needs its ``config.json``;
    anything else must be a Hugging Face repo id (``org/name``), which the stand-in takes as
    found (it has no network). A path to a directory that is not there (``/models/draft``)
    is neither, and fails the start after the target model has loaded.
    """
    if draft is None:
        return None
    path = Path(draft).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        last = (
            f"OSError: {draft} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{draft}/tree/main' for available files."
        )
    elif _REPO_ID.match(draft) and "--" not in draft and ".." not in draft:
        return None
    else:
        last = (
            f"OSError: Incorrect path_or_model_id: '{draft}'. Please provide either the path "
            "to a local folder or the repo_id of a model on the Hub."
        )
    return sglang_traceback(["head", "draft_load"], last)


# --- child processes ---------------------------------------------------------------------------


class Child(NamedTuple):
    process: subprocess.Popen[bytes]
    channel: socket.socket | None  # a scheduler's: where the listening socket is sent


def spawn_children(args: argparse.Namespace, config: dict[str, Any]) -> list[Child]:
    """One scheduler per TP rank and a detokenizer, each exec'ed under its SGLang title."""
    children = []
    titles = [f"sglang::scheduler_TP{rank}" for rank in range(args.tp_size)]
    for rank, title in enumerate([*titles, "sglang::detokenizer"]):
        scheduler = rank < args.tp_size
        ours, theirs = socket.socketpair() if scheduler else (None, None)
        spec = {
            "title": title,
            "path": str(HERE.parent),
            "module": "sglang.launch_server",
            "parent": os.getpid(),
            "orphan": scheduler and config["orphan_scheduler"],
            "gpu_index": rank if scheduler else None,
            "fd": theirs and theirs.fileno(),
            "state_dir": config["gpu_state_dir"],
            "memory_mib": config["gpu_memory_mib"],
        }
        process = subprocess.Popen(
            [title, "-c", BOOTSTRAP],
            executable=sys.executable,
            stdin=subprocess.DEVNULL,
            env={
                **os.environ,
                "_SGLANG_STANDIN_CHILD": json.dumps(spec),
                # argv[0] is the title, not a path: without a home, Python looks for its
                # standard library from the cwd up, and from "/" finds the system's instead.
                "PYTHONHOME": f"{sys.base_prefix}:{sys.base_exec_prefix}",
            },
            pass_fds=[theirs.fileno()] if theirs else [],
        )
        if theirs:
            theirs.close()
        children.append(Child(process, ours))
    return children


def watch_children(children: list[Child], config: dict[str, Any]) -> None:
    """SGLang's SIGQUIT from a dying child: the main process kills the tree, itself included."""
    while not _STOP["children"]:
        if any(child.process.poll() is not None for child in children):
            if _STOP["children"]:
                return
            log(
                "Received sigquit from a child process. It usually means the child failed.",
                stream=sys.stderr,
            )
            stop_children(children, config["orphan_scheduler"], kill=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)


def stop_children(children: list[Child], orphan: bool, kill: bool = False) -> None:
    """TERM (or KILL) the children and reap them, sparing the schedulers if they orphan."""
    _STOP["children"] = True
    stopping = [child for child in children if not (orphan and child.channel)]
    for child in stopping:
        child.process.kill() if kill else child.process.terminate()
    deadline = time.monotonic() + 2.0
    for child in stopping:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
    for child in children:
        if child.channel:
            child.channel.close()


def _child_main(spec: dict[str, Any]) -> None:
    """A scheduler or detokenizer: hold "GPU memory", exit with the parent unless orphaned."""
    with contextlib.suppress(OSError, AttributeError):  # best effort: /proc/self/comm
        ctypes.CDLL(None).prctl(15, spec["title"].encode()[:15], 0, 0, 0)  # PR_SET_NAME
    for signum in (signal.SIGTERM, signal.SIGINT):  # no handler: they die at SIGTERM
        signal.signal(signum, signal.SIG_IGN if spec["orphan"] else signal.SIG_DFL)
    registration = None
    if spec["gpu_index"] is not None:  # nvidia-smi ignores it once this pid is gone or reused
        registration = Path(spec["state_dir"]) / str(os.getpid())
        registration.parent.mkdir(parents=True, exist_ok=True)
        start_time = (
            Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
            if Path("/proc/self/stat").exists()
            else None
        )
        temporary = registration.with_name(f".{os.getpid()}.tmp")
        temporary.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "name": spec["title"],
                    "used_memory_mib": spec["memory_mib"],
                    "gpu_index": spec["gpu_index"],
                    "start_time": start_time,
                }
            )
        )
        temporary.replace(registration)
    held: list[int] = []  # the parent's listening socket, kept open for as long as we live
    if spec["fd"] is not None:
        channel = socket.socket(fileno=spec["fd"])
        threading.Thread(target=_receive_fds, args=(channel, held), daemon=True).start()
    try:
        while not _STOP["requested"] and (spec["orphan"] or os.getppid() == spec["parent"]):
            time.sleep(0.1)
    finally:
        if registration is not None:
            registration.unlink(missing_ok=True)


def _receive_fds(channel: socket.socket, held: list[int]) -> None:
    """Keep the parent's listening socket, sent once it is bound (never, if it is not)."""
    with contextlib.suppress(OSError):
        held.extend(socket.recv_fds(channel, 1, 1)[1])


# --- the HTTP server ---------------------------------------------------------------------------

_WORDS = (
    "the",
    "model",
    "answers",
    "with",
    "steady",
    "tokens",
    "while",
    "draft",
    "heads",
    "guess",
    "ahead",
    "and",
    "verify",
    "each",
    "step",
    "quickly",
)


class Standin(ThreadingHTTPServer):
    """The HTTP server plus what its handlers share: phase, in-flight count, throughput."""

    daemon_threads = True

    def __init__(self, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.args, self.config = args, config
        self.phase = "warming"  # then "ready", then "draining"
        self.lock = threading.Lock()
        self.inflight = self.peak = 0  # requests running now; most at once since last idle
        self.last_gen_throughput = 0.0
        self.eagle3 = args.speculative_algorithm == "EAGLE3"  # choices are case-sensitive
        self.speed = float(config["eagle3_tokens_per_s" if self.eagle3 else "tokens_per_s"])
        host = config.get("bind_host") or args.host
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, args.port), Handler)

    def internal_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"last_gen_throughput": self.last_gen_throughput}
        if self.eagle3:  # the EAGLE-3 speed-up, reported as the accepted tokens per step
            ratio = self.config["eagle3_tokens_per_s"] / self.config["tokens_per_s"]
            state["avg_spec_accept_length"] = round(ratio, 2)
        return state


class Handler(BaseHTTPRequestHandler):
    """SGLang's native endpoints, with FastAPI's status codes and error bodies."""

    server: Standin
    protocol_version = "HTTP/1.1"
    server_version, sys_version = "uvicorn", ""

    def reply(self, status: int, body: Any = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, message: str) -> None:
        self.reply(
            status,
            {
                "object": "error",
                "message": message,
                "param": None,
                "type": self.responses[status][0],
                "code": status,
            },
        )

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        phrase = self.responses.get(int(code), ("",))[0] if str(code).isdigit() else ""
        host, port = self.client_address[:2]
        log(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}')

    def do_GET(self) -> None:
        path, server = self.path.split("?", 1)[0], self.server
        if path in ("/health", "/health_generate"):
            if server.phase == "draining":
                log("Health check request received during shutdown. Returning 503.")
            elif server.phase == "ready":  # one token generated, seen at SGLang's 1 s poll
                time.sleep(float(server.config["health_seconds"]))
            self.reply(200 if server.phase == "ready" else 503)
        elif path in ("/model_info", "/get_model_info"):
            self.reply(
                200,
                {
                    "model_path": server.args.model_path,
                    "tokenizer_path": server.args.tokenizer_path,
                    "is_generation": True,
                    "has_image_understanding": True,
                    "model_type": "kimi_k25",
                    "architectures": [MODEL_CLASS],
                    "weight_version": "default",
                },
            )
        elif path in ("/server_info", "/get_server_info"):
            self.reply(
                200,
                {
                    **vars(server.args),
                    "internal_states": [server.internal_state()],
                    "version": VERSION,
                },
            )
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/generate":
            self.reply(404, {"detail": "Not Found"})
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except ValueError as error:
            self.error(400, f"JSON decode error: {error}")
            return
        if not isinstance(request, dict):
            self.error(400, "The request body must be a JSON object.")
            return
        prompt: Any = request.get("text", request.get("input_ids"))
        params = request.get("sampling_params") or {}
        max_new = params.get("max_new_tokens", 128) if isinstance(params, dict) else None
        ignore_eos = bool(params.get("ignore_eos", False)) if isinstance(params, dict) else False
        batch = (
            isinstance(prompt, list)
            and bool(prompt)
            and all(isinstance(item, str | list) for item in prompt)
        )
        if not (isinstance(prompt, str) or batch or (isinstance(prompt, list) and prompt)):
            self.error(400, "Either text or input_ids should be provided.")
        elif type(max_new) is not int or max_new < 0:
            self.error(400, "sampling_params.max_new_tokens must be a non-negative integer.")
        elif self.server.phase == "draining":
            self.error(503, "The server is shutting down.")
        else:
            self.generate(prompt if batch else [prompt], max_new, batch, ignore_eos)

    do_PUT = do_POST

    def generate(self, prompts: list[Any], max_new: int, batch: bool, ignore_eos: bool) -> None:
        """Answer after ``tokens / speed`` seconds, however many requests run meanwhile.

        With ``eos_after_tokens`` set, the "model" emits an end-of-sequence token after that
        many tokens, as a real one does somewhere, and only ``ignore_eos`` makes the request
        generate all ``max_new`` tokens.
        """
        server, started = self.server, time.monotonic()
        seeds = [zlib.crc32(json.dumps(prompt).encode()) for prompt in prompts]
        eos = server.config["eos_after_tokens"]
        length = max_new if ignore_eos or eos is None else min(max_new, int(eos))
        lengths = [length for _ in prompts]
        with server.lock:
            server.inflight += 1
            server.peak = max(server.peak, server.inflight)
        log(
            f"Prefill batch. #new-seq: {len(prompts)}, #cached-token: 0, "
            f"#running-req: {server.inflight - 1}, #queue-req: 0",
            "TP0",
        )
        time.sleep(max(lengths, default=0) / server.speed)
        with server.lock:  # like SGLang's: tokens/s of the whole running batch
            server.last_gen_throughput = round(server.speed * server.peak, 2)
            server.inflight -= 1
            server.peak = server.peak if server.inflight else 0
        outputs = []
        for prompt, seed, length in zip(prompts, seeds, lengths, strict=True):
            finish = (
                {"type": "length", "length": length}
                if length == max_new
                else {"type": "stop", "matched": 163586}
            )
            prompt_tokens = len(prompt if isinstance(prompt, list) else str(prompt).split())
            outputs.append(
                {
                    "text": " ".join(_WORDS[(seed + 7 * i) % len(_WORDS)] for i in range(length)),
                    "meta_info": {
                        "id": uuid.uuid4().hex,
                        "finish_reason": finish,
                        "prompt_tokens": max(1, prompt_tokens),
                        "completion_tokens": length,
                        "cached_tokens": 0,
                        "e2e_latency": round(time.monotonic() - started, 4),
                    },
                }
            )
        self.reply(200, outputs if batch else outputs[0])


# --- the process -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Start, serve and stop like ``sglang.launch_server``; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)  # exit 2 on a bad flag, as 0.5.9
    try:
        config = load_config()
    except (ValueError, TypeError) as error:
        print(f"sglang stand-in: bad configuration: {error}", file=sys.stderr, flush=True)
        return 2
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in vars(args).items()) + ")")
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _request_stop)
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
