"""Run ids, in a module that imports nothing heavy: a command names its run (for its log file)
before it has read its input, and well before it imports the SSH stack."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from deploy.errors import InputError


def new_run_id() -> str:
    """A unique run id: UTC time to the microsecond plus 6 hex digits.

    Readable and roughly time-ordered; decisions never sort these as text (a host's runs are
    ordered by the ``host_seq`` of their journals, `deploy.statedir.runs.ordered`).
    """
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ") + "-" + secrets.token_hex(3)


#: What a run id (or a part of one given on the command line) may hold: it names a file on the
#: workstation and a directory on every host, so never a path separator, a leading dot or a
#: character a shell or a glob would read.
_RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,99}")
#: A whole run id as `new_run_id` makes it.
_FULL_RUN_ID = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{6}")


def check_run_id(text: str) -> str:
    """``text`` if it may be (part of) a run id; else a one-line InputError (exit 2).

    Raises:
        InputError: a path (``/``, ``..``), an empty id, or characters no run id has.
    """
    if not _RUN_ID.fullmatch(text):
        raise InputError(
            f"{text!r} is not a run id (letters, digits, '.', '_' and '-'; "
            "see `deploy history` or `deploy status`)"
        )
    return text


def is_full_run_id(text: str) -> bool:
    """Whether ``text`` is a whole run id, not a unique part of one."""
    return _FULL_RUN_ID.fullmatch(text) is not None
