"""Load generator that runs ON THE HOST: the throughput gate's waves of streamed requests.

Sent as ``python3 -I -S -c SOURCE`` (`deploy.services.load`) in the run's session behind the
lock, its arguments as JSON on stdin (the API key among them: never in a command line,
which every local user can read); it prints one JSON object. Standard library only, Python 3.8
syntax, no annotations: it runs on whatever python3 the host has.

Why on the host: `deploy.services.load`. Each request is its own TCP connection to the server's
address with ``"stream": true``: SGLang answers ``data: {json}`` events (``text`` so far,
``meta_info.completion_tokens``) as tokens come, then ``data: [DONE]``. The first event with a
token is the time to first token; the last one ends the request.

Input: ``{address, port, headers, prompts, max_new_tokens, timeout, warmup, plan,
idle_wait}``, ``plan`` being ``[[concurrency, waves], ...]``. Output: ``{levels:
[{concurrency, waves: [{wall, busy, requests: [[ttft_s, decode_s, completion_tokens,
spec_accept_length, first_tokens]]}]}], busy_max, busy_source, idle_waited,
avg_spec_accept_length}``, or ``{error}``.

Before each wave, with ``idle_wait`` > 0, it asks the server how many requests run (``/v1/loads``'
``aggregate``, SGLang 0.5.9; else ``/metrics``' ``sglang:num_running_reqs`` and
``num_queue_reqs``), since other clients' traffic would be measured with ours, and waits while
that is not 0, up to ``idle_wait`` seconds over the run; then it measures anyway and reports
what ran beside it (``busy``, ``busy_max``).
"""

import http.client
import json
import sys
import threading
import time


class LoadError(Exception):
    """A request failed: the whole measurement is void."""


def _connect(args):
    return http.client.HTTPConnection(args["address"], int(args["port"]), timeout=args["timeout"])


def _get(args, path):
    """(status, body) of one GET, or (None, b"") when nothing answers."""
    connection = _connect(args)
    try:
        connection.request("GET", path, headers=dict(args.get("headers") or {}))
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None, b""
    finally:
        connection.close()


def running_requests(args):
    """(requests running or waiting on the server, where that was read), or (None, None)."""
    status, body = _get(args, "/v1/loads?include=core")
    if status == 200:
        try:
            total = json.loads(body.decode())["aggregate"]
            return int(total["total_running_reqs"]) + int(total["total_waiting_reqs"]), "/v1/loads"
        except (ValueError, KeyError, TypeError):
            pass
    status, body = _get(args, "/metrics")
    if status == 200:
        count, seen = 0.0, False
        for line in body.decode("utf-8", "replace").splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
                try:
                    count += float(line.rsplit(" ", 1)[1])
                    seen = True
                except (IndexError, ValueError):
                    pass
        if seen:
            return int(count), "/metrics"
    return None, None


def one_request(args, prompt, began):
    """One streamed generation: [ttft_s, decode_s, completion_tokens, spec_accept_length,
    tokens in the first event] (decode_s: from the first event to the last)."""
    sampling = {"max_new_tokens": args["max_new_tokens"], "ignore_eos": True, "temperature": 0}
    body = json.dumps({"text": prompt, "sampling_params": sampling, "stream": True})
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    headers.update(args.get("headers") or {})
    connection = _connect(args)
    first = last = None
    tokens, accept, at_first = 0, None, 0
    try:
        connection.request("POST", "/generate", body=body, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise LoadError(
                f"POST /generate answered HTTP {response.status}: {response.read()[:200]!r}"
            )
        for raw in response:  # one line at a time, as the events come
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            event = json.loads(payload.decode())
            if isinstance(event, dict) and event.get("error"):
                raise LoadError(f"POST /generate streamed an error: {event['error']!r}")
            meta = event.get("meta_info") or {} if isinstance(event, dict) else {}
            count = meta.get("completion_tokens")
            if type(count) is not int:
                raise LoadError("POST /generate streamed no meta_info.completion_tokens")
            now = time.monotonic()
            if count >= 1 and first is None:
                first, at_first = now, count
            last, tokens = now, count
            if meta.get("spec_accept_length") is not None:
                accept = float(meta["spec_accept_length"])
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise LoadError(f"POST /generate failed: {exc}") from exc
    finally:
        connection.close()
    if first is None or last is None:
        raise LoadError("POST /generate streamed no token")
    return [first - began, last - first, tokens, accept, at_first]


def wave(args, concurrency, offset):
    """``concurrency`` requests released at once (prompts in turn from ``offset``)."""
    prompts = args["prompts"]
    results = [None] * concurrency
    errors = []
    gate = threading.Barrier(concurrency + 1)

    def run(index):
        gate.wait()
        sent = time.monotonic()
        try:
            results[index] = one_request(args, prompts[(offset + index) % len(prompts)], sent)
        except LoadError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    gate.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    ended = time.monotonic()
    if errors:
        raise LoadError(errors[0])
    return {"wall": ended - began, "requests": results}


def accept_length(args):
    """``avg_spec_accept_length`` from /server_info (or /get_server_info), None if absent."""
    for path in ("/server_info", "/get_server_info"):
        status, body = _get(args, path)
        if status != 200:
            continue
        try:
            states = json.loads(body.decode()).get("internal_states") or []
        except (ValueError, AttributeError):
            return None
        for state in states:
            if isinstance(state, dict) and state.get("avg_spec_accept_length") is not None:
                return float(state["avg_spec_accept_length"])
        return None
    return None


def measure(args):
    high = max([int(c) for c, _ in args["plan"]] or [1])
    warm = max(0, int(args.get("warmup") or 0))
    for offset in range(0, warm, high):  # uncounted: answers checked, not timed
        wave(args, min(high, warm - offset), offset)
    offset = warm
    idle_wait = float(args.get("idle_wait") or 0)  # seconds, over the whole run
    checking = idle_wait > 0
    busy_max, source, waited_total, levels = None, None, 0.0, []
    for concurrency, count in args["plan"]:
        waves = []
        for _ in range(int(count)):
            busy = None
            if checking:
                began = time.monotonic()  # polled while busy, within what is left of idle_wait
                busy, where = running_requests(args)
                while busy and time.monotonic() - began < idle_wait - waited_total:
                    time.sleep(0.25)
                    busy, where = running_requests(args)
                waited_total += time.monotonic() - began
                if where is None:
                    checking = False  # the server cannot say: not asked again
                else:
                    source = where
                    busy_max = max(busy_max or 0, busy)
            result = wave(args, int(concurrency), offset)
            result["busy"] = busy
            offset += int(concurrency)
            waves.append(result)
        levels.append({"concurrency": int(concurrency), "waves": waves})
    return {
        "levels": levels,
        "busy_max": busy_max,
        "busy_source": source,
        "idle_waited": round(waited_total, 3),
        "avg_spec_accept_length": accept_length(args),
    }


def main():
    args = json.loads(sys.stdin.buffer.read().decode())
    try:
        answer = measure(args)
    except LoadError as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
