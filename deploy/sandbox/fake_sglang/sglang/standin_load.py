"""The stand-in under load: a speed that depends on how many requests run, streaming, /v1/loads.

SGLang batches: one more request costs a running batch little, until it does. EAGLE-3 in
0.5.9 caps running requests at 48 and turns the overlap scheduler off, so it can win at
concurrency 1 and lose under production load. ``tokens_per_s_at`` and
``eagle3_tokens_per_s_at`` (``"1:96.1,32:40"``: each request's tokens/s while that many run,
straight lines between the points, flat beyond them) let a test build exactly that; empty, a
request decodes at ``tokens_per_s`` (``eagle3_tokens_per_s``) however many run.

``"stream": true`` answers as 0.5.9's ``/generate`` does: ``text/event-stream``, chunked,
``data: {json}`` events (``text`` so far, ``meta_info`` with ``completion_tokens``) as tokens
come, at most every ``stream_interval_s``, then ``data: [DONE]``. The first event carries the
first token. With EAGLE-3, ``meta_info`` carries ``spec_accept_length`` and
``spec_verify_ct`` (``eagle3_accept_length``, or EAGLE-3's speed over the plain one, at
least 1).
``/v1/loads`` reports the requests running, in 0.5.9's shape.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from typing import Any


def speed_table(text: str) -> list[tuple[int, float]]:
    """``"1:96.1,32:40"`` as [(1, 96.1), (32, 40.0)], sorted; empty text, empty table.

    Raises:
        ValueError: not ``N:SPEED`` pairs with N >= 1 and SPEED > 0.
    """
    table = []
    for item in (text or "").replace(" ", "").split(","):
        if not item:
            continue
        count, _, speed = item.partition(":")
        point = (int(count), float(speed))
        if point[0] < 1 or point[1] <= 0:
            raise ValueError(f"tokens_per_s_at: {item!r} is not N:SPEED with N >= 1, SPEED > 0")
        table.append(point)
    return sorted(table)


def speed_at(table: list[tuple[int, float]], flat: float, running: int) -> float:
    """Each request's tokens/s while ``running`` requests run."""
    if not table:
        return flat
    if running <= table[0][0]:
        return table[0][1]
    for (n0, s0), (n1, s1) in itertools.pairwise(table):
        if running <= n1:
            return s0 + (s1 - s0) * (running - n0) / (n1 - n0)
    return table[-1][1]


def accept_length(config: dict[str, Any]) -> float:
    """EAGLE-3's accepted tokens per verify step: configured, or its speed-up (at least 1:
    the verified token itself; an EAGLE-3 slower than plain decoding accepted no draft)."""
    if config.get("eagle3_accept_length") is not None:
        return float(config["eagle3_accept_length"])
    speedup = float(config["eagle3_tokens_per_s"]) / float(config["tokens_per_s"])
    return max(1.0, round(speedup, 2))


def spec_meta(eagle3: bool, config: dict[str, Any], tokens: int) -> dict[str, Any]:
    """``spec_accept_length`` and ``spec_verify_ct`` of a generation, with EAGLE-3."""
    if not eagle3:
        return {}
    length = accept_length(config)
    return {"spec_accept_length": length, "spec_verify_ct": math.ceil(tokens / max(length, 1e-9))}


def loads(running: int) -> dict[str, Any]:
    """0.5.9's ``GET /v1/loads`` (one DP rank, the core section)."""
    load = {
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": 0,
        "num_total_reqs": running,
    }
    return {
        "version": "0.5.9-standin",
        "dp_rank_count": 1,
        "loads": [load],
        "aggregate": {
            "total_running_reqs": running,
            "total_waiting_reqs": 0,
            "total_reqs": running,
        },
    }


def stream(handler: Any, text_of: Any, length: int, meta: dict[str, Any]) -> None:
    """Answer ``length`` tokens as server-sent events while they are "decoded".

    ``handler``: the stand-in's request handler (its ``server`` has ``speed_now()`` and
    ``config``); ``text_of(n)``: the text of the first n tokens; ``meta``: the ``meta_info``
    of the finished generation, ``completion_tokens`` updated as tokens come.
    """
    server = handler.server
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()

    def send(data: bytes) -> None:
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    def event(done: int) -> None:
        info = {**meta, "completion_tokens": done, **spec_meta(server.eagle3, server.config, done)}
        send(b"data: " + json.dumps({"text": text_of(done), "meta_info": info}).encode() + b"\n\n")

    interval = float(server.config["stream_interval_s"])
    made, sent, last = 0.0, 0, time.monotonic()
    while sent < length:
        speed = server.speed_now()
        wait = (1.0 - made) / speed if sent == 0 else min(interval, (length - made) / speed)
        time.sleep(max(wait, 0.001))
        now = time.monotonic()
        made = min(float(length), made + (now - last) * server.speed_now())
        last = now
        if int(made + 1e-9) > sent:  # the first event: the first token, as after a prefill
            sent = int(made + 1e-9)
            event(sent)
    send(b"data: [DONE]\n\n")
    send(b"")
