"""The stand-in's ``sglang.srt.server_args``: 0.5.9's ``ServerArgs.add_cli_args``, so that a
check of a command line against the server's own argument parser (as deploy makes before it
stops a server) meets exactly the parser `launch_server` uses (`standin_args`)."""

from __future__ import annotations

import argparse

from ..standin_args import build_parser


class ServerArgs:
    """Only what a command-line check reaches: the options 0.5.9 declares."""

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for action in build_parser()._actions:
            if action.dest == "help":
                continue
            parser._add_action(action)


def __getattr__(name: str) -> object:
    """Anything else SGLang's own modules take from here (``get_global_server_args``): a stub
    (`standin_stubs`), so that the real model file imports."""
    from ..standin_stubs import _Stub

    if name.startswith("__"):
        raise AttributeError(name)
    return _Stub(name)
