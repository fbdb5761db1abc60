"""The gate's load, generated on the host: one program per level, behind the run's lock.

32 streams through one SSH connection would make the workstation and the tunnel the
bottleneck (measured on the sandbox: 895 tok/s where the server made 2400) and their noise
the spread. So the waves run on the host itself: `LOADGEN` (standard library only, run by the
service's ``agent_python``; its input, the API key included, on stdin, never on argv) sends
``concurrency`` requests at once to the address the server listens on, ``samples`` times, and
answers each wave's completion tokens, wall time and acceptance lengths as JSON. Requests
stream (``"stream": true``, server-sent events), so each one's time to first token and its
decode speed after it (tokens after the first chunk over the time after it) are real.
"""

from __future__ import annotations

import json
from typing import Any

from deploy.errors import CheckFailed
from deploy.remote.host import quote
from deploy.services.control import ServiceControl

LOADGEN = r"""
import http.client, json, sys, threading, time
job = json.loads(sys.stdin.read())

def one(index, out):
    body = dict(job["bodies"][index % len(job["bodies"])], stream=True)
    headers = {"Content-Type": "application/json", **job["headers"]}
    began = time.monotonic()
    first = first_tokens = meta = None
    try:
        conn = http.client.HTTPConnection(job["address"], job["port"], timeout=job["timeout"])
        conn.request("POST", "/generate", body=json.dumps(body).encode(), headers=headers)
        reply = conn.getresponse()
        if reply.status != 200:
            raw = reply.read()
            out[index] = {"error": "POST /generate answered HTTP %d: %r" % (reply.status, raw[:200])}
            return
        while True:  # server-sent events: data: {...} per chunk, then data: [DONE]
            line = reply.readline()
            if not line or line.strip() == b"data: [DONE]":
                break
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            meta = chunk["meta_info"]
            if first is None and meta.get("completion_tokens"):
                first, first_tokens = time.monotonic(), meta["completion_tokens"]
        end = time.monotonic()
        conn.close()
    except Exception as exc:
        out[index] = {"error": "POST /generate failed: %s" % exc}
        return
    if not meta or "completion_tokens" not in meta:
        out[index] = {"error": "POST /generate streamed no meta_info.completion_tokens"}
        return
    tokens = meta["completion_tokens"]
    decode = None
    if first is not None and tokens > first_tokens and end > first:
        decode = (tokens - first_tokens) / (end - first)
    out[index] = {
        "tokens": tokens,
        "accept": meta.get("spec_accept_length"),
        "ttft": None if first is None else first - began,
        "decode": decode,
    }

def wave(count):
    out = [None] * count
    threads = [threading.Thread(target=one, args=(i, out)) for i in range(count)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"wall": time.monotonic() - began, "answers": out}

if job["warmup"]:
    wave(job["warmup"])
print(json.dumps([wave(job["concurrency"]) for _ in range(job["samples"])]))
"""


def run_waves(
    svc: ServiceControl,
    bodies: list[dict[str, Any]],
    *,
    concurrency: int,
    samples: int,
    timeout: float,
    warmup: int = 0,
) -> list[dict[str, Any]]:
    """``samples`` waves of ``concurrency`` requests at once, sent from the host itself
    (after ``warmup`` uncounted requests); each wave's ``wall`` and ``answers``.

    Raises:
        CheckFailed: the program failed, or a request failed (the first error said).
    """
    where = svc.endpoint
    job = {
        "address": where.address,
        "port": where.port,
        "headers": where.headers(),
        "bodies": bodies,
        "concurrency": concurrency,
        "samples": samples,
        "timeout": timeout,
        "warmup": warmup,
    }
    python = quote(svc.spec.agent_python)
    result = svc.remote.run(
        f"{python} -c {quote(LOADGEN)}",
        stdin=json.dumps(job).encode(),
        timeout=timeout * (samples + 1) + 60,
    )
    if not result.ok:
        raise CheckFailed(
            f"{svc.remote.name}: the load generator failed: "
            f"{result.tail(3) or f'exit {result.exit_status}'}"
        )
    try:
        waves: list[dict[str, Any]] = json.loads(result.stdout)
    except ValueError as exc:
        raise CheckFailed(f"{svc.remote.name}: the load generator gave no answer") from exc
    for item in waves:
        for answer in item["answers"]:
            if answer.get("error"):
                raise CheckFailed(str(answer["error"]))
    return waves
