"""The stand-in's command line: SGLang 0.5.9's argparse, as strict as the real one.

A lenient stand-in lets a typo in a playbook pass every test and fail on the first real host.
So this parser behaves like 0.5.9's ``prepare_server_args`` (``ServerArgs.add_cli_args`` on a
plain ``argparse.ArgumentParser()``, then ``parse_args``):

* an unknown flag exits 2 with argparse's own usage line and ``error: unrecognized arguments``;
* choices are case-sensitive: ``--speculative-algorithm`` takes EAGLE, EAGLE3, NEXTN,
  STANDALONE or NGRAM, and ``eagle3`` is refused (exit 2, ``invalid choice``);
* abbreviations resolve as argparse's ``allow_abbrev`` does: ``--tp 8`` is ``--tp-size 8``
  (0.5.9 has no ``--tp`` option; it is the only unambiguous prefix), ``--speculative-algo`` is
  the algorithm, and an ambiguous prefix exits 2;
* ``--model`` and ``--tensor-parallel-size``, ``--speculative-draft-model`` are 0.5.9's aliases.

The options the stand-in acts on are declared here, with 0.5.9's types, defaults and choices.
Every other 0.5.9 option is accepted and ignored, with the number of values it takes, when
``server_flags.json`` lies beside this file: the sandbox writes it from the wheel's
``server_args.py`` (`deploy.sandbox.wheels.server_flags`), so nothing of SGLang is committed
and prefixes are exactly as ambiguous as in SGLang. Without that file, only the options below
exist, which is stricter than SGLang, never more lenient.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FLAGS_FILE = HERE / "server_flags.json"
SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]

#: (option strings, add_argument keywords) of the options the stand-in acts on, as in 0.5.9.
OWN: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--model-path", "--model"), {"type": str, "required": True}),
    (("--tokenizer-path",), {"type": str, "default": None}),
    (("--trust-remote-code",), {"action": "store_true"}),
    (("--context-length",), {"type": int, "default": None}),
    (("--host",), {"type": str, "default": "127.0.0.1"}),
    (("--port",), {"type": int, "default": 30000}),
    (("--mem-fraction-static",), {"type": float, "default": None}),
    (("--tensor-parallel-size", "--tp-size"), {"type": int, "default": 1, "dest": "tp_size"}),
    (("--served-model-name",), {"type": str, "default": None}),
    (("--api-key",), {"type": str, "default": None}),
    (("--speculative-algorithm",), {"type": str, "choices": SPECULATIVE_ALGORITHMS}),
    (
        ("--speculative-draft-model-path", "--speculative-draft-model"),
        {"type": str, "dest": "speculative_draft_model_path"},
    ),
    (("--speculative-num-steps",), {"type": int, "default": None}),
    (("--speculative-eagle-topk",), {"type": int, "default": None}),
    (("--speculative-num-draft-tokens",), {"type": int, "default": None}),
]


def other_flags() -> list[dict[str, Any]]:
    """0.5.9's remaining options from ``server_flags.json`` (empty when it is absent)."""
    if not FLAGS_FILE.exists():
        return []
    flags: list[dict[str, Any]] = json.loads(FLAGS_FILE.read_text())
    return flags


def build_parser() -> argparse.ArgumentParser:
    """0.5.9's parser: default ``prog`` (``launch_server.py``) and ``allow_abbrev``."""
    parser = argparse.ArgumentParser()
    own = {name for names, _ in OWN for name in names}
    for names, keywords in OWN:
        parser.add_argument(*names, **keywords)
    for flag in other_flags():
        others = [str(name) for name in flag["names"]]
        if own.intersection(others):
            continue
        nargs = flag["nargs"]
        if nargs == 0:
            parser.add_argument(*others, action="store_true", default=argparse.SUPPRESS)
        elif nargs == 1:
            parser.add_argument(*others, default=argparse.SUPPRESS)
        else:
            parser.add_argument(*others, nargs=nargs, default=argparse.SUPPRESS)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse like 0.5.9 (exit 2 with argparse's message on any error), then its defaults:
    the tokenizer and the served model name default to the model path."""
    args = build_parser().parse_args(argv)
    args.tokenizer_path = args.tokenizer_path or args.model_path
    args.served_model_name = args.served_model_name or args.model_path
    return args
