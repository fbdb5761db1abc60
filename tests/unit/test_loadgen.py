"""The gate's load generator (`deploy.services.loadgen`) against small HTTP servers on loopback.

Its happy path against the stand-in SGLang is in tests/unit/test_service_local.py and
tests/integration/test_service_gate.py; here: how it reads a server's load (``/v1/loads``,
else ``/metrics``, else nothing), what it makes of a streamed answer, and that it runs as the
host runs it (``python3 -I -S -c``, Python 3.8 syntax, nothing from deploy).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from deploy.services import loadgen
from deploy.services.load import LOADGEN_SOURCE

Route = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def serving(routes: dict[str, Route]) -> Iterator[dict[str, Any]]:
    """A loopback HTTP server answering ``routes`` (path -> handler), 404 elsewhere; yields
    the generator's connection arguments."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def answer(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            route(self)

        do_GET = do_POST = answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"address": "127.0.0.1", "port": server.server_address[1], "timeout": 10}
    finally:
        server.shutdown()
        server.server_close()


def body(data: bytes, status: int = 200) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return route


METRICS = b"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="kimi",engine_type="unified"} 3.0
sglang:num_queue_reqs{model_name="kimi",engine_type="unified"} 2.0
sglang:num_used_tokens{model_name="kimi",engine_type="unified"} 9000.0
"""


def test_the_load_comes_from_v1_loads_else_metrics_else_nothing() -> None:
    loads = json.dumps({"aggregate": {"total_running_reqs": 4, "total_waiting_reqs": 1}}).encode()
    with serving({"/v1/loads": body(loads), "/metrics": body(METRICS)}) as args:
        assert loadgen.running_requests(args) == (5, "/v1/loads")
    with serving({"/metrics": body(METRICS)}) as args:  # an older server: Prometheus only
        assert loadgen.running_requests(args) == (5, "/metrics")
    with serving({"/v1/loads": body(b"not json"), "/metrics": body(b"# nothing\n")}) as args:
        assert loadgen.running_requests(args) == (None, None)


def sse(events: list[bytes]) -> Route:
    """A streamed answer: ``data:`` events, one write each, then ``[DONE]``."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers["Content-Length"]))
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for event in [*events, b"[DONE]"]:
            handler.wfile.write(b"data: " + event + b"\n\n")
            handler.wfile.flush()

    return route


def event(tokens: int, accept: float | None = None) -> bytes:
    meta: dict[str, Any] = {"completion_tokens": tokens}
    if accept is not None:
        meta["spec_accept_length"] = accept
    return json.dumps({"text": "x" * tokens, "meta_info": meta}).encode()


def test_a_streamed_request_times_its_first_token_and_the_rest() -> None:
    args = {"max_new_tokens": 8, "prompts": ["p"]}
    with serving({"/generate": sse([event(1), event(4), event(8, 2.5)])}) as conn:
        ttft, decode, tokens, accept, first = loadgen.one_request({**args, **conn}, "p", 0.0)
    assert (tokens, accept, first) == (8, 2.5, 1) and ttft > 0 and decode >= 0


@pytest.mark.parametrize(
    ("route", "words"),
    [
        (body(b'{"error": "Unauthorized"}', 401), "answered HTTP 401"),
        (sse([]), "streamed no token"),
        (sse([b'{"error": {"message": "boom"}}']), "streamed an error"),
        (sse([b'{"text": "x"}']), "no meta_info.completion_tokens"),
    ],
    ids=["401", "no token", "error event", "no count"],
)
def test_a_bad_answer_voids_the_measurement(route: Route, words: str) -> None:
    with serving({"/generate": route}) as conn:
        args = {**conn, "max_new_tokens": 8, "prompts": ["p"], "plan": [[1, 1]], "warmup": 0}
        with pytest.raises(loadgen.LoadError, match=words):
            loadgen.measure(args)


def test_it_runs_as_the_host_runs_it() -> None:
    """``-I -S``, Python 3.8 syntax, nothing from deploy; the API key travels on stdin."""
    text = LOADGEN_SOURCE
    ast.parse(text, feature_version=(3, 8))
    assert not re.findall(r"^\s*(from|import) deploy\b", text, re.MULTILINE)
    seen: list[str] = []

    def generate(handler: BaseHTTPRequestHandler) -> None:
        seen.append(handler.headers.get("Authorization") or "")
        sse([event(1), event(16, 3.0)])(handler)

    routes = {
        "/generate": generate,
        "/server_info": body(b'{"internal_states": [{"avg_spec_accept_length": 3.1}]}'),
    }
    with serving(routes) as conn:
        request = {
            **conn,
            "headers": {"Authorization": "Bearer s3cret"},
            "prompts": ["a", "b"],
            "max_new_tokens": 16,
            "warmup": 2,
            "plan": [[1, 2], [3, 1]],
            "idle_wait": 1,
        }
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-c", text],
            input=json.dumps(request).encode(),
            capture_output=True,
            check=True,
            timeout=60,
            cwd="/",
        )
    answer = json.loads(out.stdout)
    assert [(level["concurrency"], len(level["waves"])) for level in answer["levels"]] == [
        (1, 2),
        (3, 1),
    ]
    assert [len(wave["requests"]) for wave in answer["levels"][1]["waves"]] == [3]
    assert answer["avg_spec_accept_length"] == 3.1
    assert (answer["busy_max"], answer["busy_source"]) == (None, None)  # it could not say
    assert seen == ["Bearer s3cret"] * (2 + 2 + 3)


def test_the_stand_ins_speed_by_running_requests() -> None:
    """``"1:96.1,32:40"``: straight lines between the points, flat beyond; empty: flat."""
    from deploy.sandbox.fake_sglang.sglang import standin_load

    table = standin_load.speed_table("32:40, 1:96.1")
    assert table == [(1, 96.1), (32, 40.0)]
    assert standin_load.speed_at(table, 75.0, 1) == 96.1
    assert standin_load.speed_at(table, 75.0, 64) == 40.0
    assert standin_load.speed_at(table, 75.0, 16) == pytest.approx(96.1 - 56.1 * 15 / 31)
    assert standin_load.speed_at([], 75.0, 32) == 75.0
    with pytest.raises(ValueError, match="N:SPEED"):
        standin_load.speed_table("0:10")
    config = {"eagle3_tokens_per_s": 54.1, "tokens_per_s": 75.0, "eagle3_accept_length": None}
    assert standin_load.accept_length(config) == 1.0  # slower: no draft token accepted
    assert standin_load.spec_meta(True, {**config, "eagle3_accept_length": 2.5}, 10) == {
        "spec_accept_length": 2.5,
        "spec_verify_ct": 4,
    }
