"""JSON for the file helper ON THE HOST (`deploy.remote.fileagent`), without ``import json``.

A part of the helper's program (`deploy.remote.hostprogram` inlines it): standard library only,
no syntax newer than Python 3.8, no annotations.

Why: the helper starts once per run on every host, and ``import json`` was the largest part of
its start-up — ``json.decoder`` imports ``re``, which imports ``enum``, ``functools`` and
``collections``: ~9 ms of the host's CPU of the helper's ~28 (measured on Python 3.11, issue
17), for headers of a few hundred bytes. ``json`` itself does its work in its C accelerator
``_json`` (``c_make_scanner``, ``c_make_encoder``); these are the same two objects, built the
way ``json`` builds them for ``loads``/``dumps`` with default arguments, so the text and the
values are ``json``'s own. Should an interpreter lack ``_json`` or build them differently
(checked once, against a sample, at start), ``json`` is imported as before.
"""


def _plain_json():
    import json

    return json.loads, json.dumps


def _accelerated():
    """(loads, dumps) on ``_json``'s scanner and encoder, or None when they do not fit."""
    try:
        import _json
    except ImportError:
        return None

    class _Context:
        # What json.decoder.JSONDecoder() gives c_make_scanner by default.
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {
            "-Infinity": float("-inf"),
            "Infinity": float("inf"),
            "NaN": float("nan"),
        }.__getitem__

    def _default(value):
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    try:
        scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
        # As json.dumps(value) with default arguments: ensure_ascii, allow_nan, ", " and ": ".
        encode = _json.make_encoder(
            {}, _default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
        )
    except Exception:
        return None
    space = " \t\n\r"

    def loads(text):
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        start = len(text) - len(text.lstrip(space))
        try:
            value, end = scan(text, start)
        except StopIteration:
            raise ValueError(f"Expecting value: char {start}") from None
        if text[end:].strip(space):
            raise ValueError(f"Extra data: char {end}")
        return value

    def dumps(value):
        return "".join(encode(value, 0))

    sample = {"b": [1, -2.5, None, True, False, '\u00e9\n"\\'], "a": {"c": ""}}
    try:
        import_free = dumps(sample)
        if (
            import_free
            != ('{"b": [1, -2.5, null, true, false, "\\u00e9\\n\\"\\\\"], "a": {"c": ""}}')
            or loads(import_free) != sample
        ):
            return None
    except Exception:
        return None
    return loads, dumps


loads, dumps = _accelerated() or _plain_json()
