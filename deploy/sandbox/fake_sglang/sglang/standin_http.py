"""The stand-in's HTTP API: SGLang's ``/health``, ``/model_info``, ``/server_info``, ``/generate``.

`Standin` is the server plus what its handlers share (phase: warming, ready, draining;
requests in flight; the last generation's throughput); `Handler` answers as SGLang 0.5.9 does
(503 while warming or draining, ``meta_info.completion_tokens``, ``internal_states``). With
``--api-key``, every path but ``/health*`` and ``/metrics`` wants ``Authorization: Bearer
KEY`` and answers 401 ``{"error": "Unauthorized"}`` without it, as 0.5.9's auth middleware
(``sglang/srt/utils/auth.py``) does.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import socket
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .standin_config import MODEL_CLASS, VERSION, log
from .standin_load import accept_length, loads, spec_meta, speed_at, speed_table, stream

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
    #: uvicorn's backlog is 2048; socketserver's default of 5 resets a wave of 32 connects.
    request_queue_size = 256

    def __init__(self, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.args, self.config = args, config
        self.phase = "warming"  # then "ready", then "draining"
        self.lock = threading.Lock()
        self.inflight = self.peak = 0  # requests running now; most at once since last idle
        self.last_gen_throughput = 0.0
        self.eagle3 = args.speculative_algorithm == "EAGLE3"  # choices are case-sensitive
        self.speed = float(config["eagle3_tokens_per_s" if self.eagle3 else "tokens_per_s"])
        #: Each request's speed by how many run (`standin_load`); empty: always `speed`.
        self.speeds = speed_table(
            config["eagle3_tokens_per_s_at" if self.eagle3 else "tokens_per_s_at"]
        )
        host = config.get("bind_host") or args.host
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, args.port), Handler)

    def speed_now(self) -> float:
        """Each request's tokens/s with as many running as now."""
        return speed_at(self.speeds, self.speed, max(1, self.inflight))

    def internal_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"last_gen_throughput": self.last_gen_throughput}
        if self.eagle3:  # accepted tokens per verify step (by default the EAGLE-3 speed-up)
            state["avg_spec_accept_length"] = accept_length(self.config)
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

    def authorized(self, path: str) -> bool:
        """0.5.9's ``decide_request_auth`` for a server with ``--api-key`` only: health and
        metrics are open, everything else wants the bearer key (else 401, answered here)."""
        key = self.server.args.api_key
        if not key or path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode()):
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        path, server = self.path.split("?", 1)[0], self.server
        if not self.authorized(path):
            return
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
        elif path == "/get_load":  # one scheduler (dp rank 0): requests running, none queued
            self.reply(
                200,
                [
                    {
                        "dp_rank": 0,
                        "num_reqs": server.inflight,
                        "num_waiting_reqs": 0,
                        "num_tokens": 0,
                        "ts_tic": time.time(),
                    }
                ],
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
        elif path == "/v1/loads":
            self.reply(200, loads(server.inflight))
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if not self.authorized(self.path.split("?", 1)[0]):
            return
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
        else:  # admitted while draining too: 0.5.9's /generate does not look at the flag
            streamed = bool(request.get("stream")) and not batch
            self.generate(prompt if batch else [prompt], max_new, batch, ignore_eos, streamed)

    do_PUT = do_POST

    def generate(
        self,
        prompts: list[Any],
        max_new: int,
        batch: bool,
        ignore_eos: bool,
        streamed: bool = False,
    ) -> None:
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
        if streamed:  # the tokens as they come (`standin_load.stream`), then the same ending
            words = [_WORDS[(seeds[0] + 7 * i) % len(_WORDS)] for i in range(length)]
            meta = {"id": uuid.uuid4().hex, "prompt_tokens": 1, "cached_tokens": 0}
            with contextlib.suppress(OSError):
                stream(self, lambda n: " ".join(words[:n]), length, meta)
        else:
            time.sleep(max(lengths, default=0) / server.speed_now())
        with server.lock:  # like SGLang's: tokens/s of the whole running batch
            server.last_gen_throughput = round(server.speed_now() * server.peak, 2)
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
                        **spec_meta(server.eagle3, server.config, length),
                    },
                }
            )
        if not streamed:
            self.reply(200, outputs if batch else outputs[0])
