"""Run ids, in a module that imports nothing heavy: a command names its run (for its log file)
before it has read its input, and well before it imports the SSH stack."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def new_run_id() -> str:
    """A unique run id: UTC time to the microsecond plus 6 hex digits.

    Readable and roughly time-ordered; decisions never sort these as text (a host's runs are
    ordered by the ``host_seq`` of their journals, `deploy.statedir.runs.ordered`).
    """
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ") + "-" + secrets.token_hex(3)
