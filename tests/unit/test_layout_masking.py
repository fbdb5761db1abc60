"""A secret is masked whole before the terminal's layout wraps or shortens the text it is in.

The terminal streams mask line by line (`deploy.masking.MaskedStream`): a secret that the
layout (`deploy.report.text`) had split over two lines, or cut short, matched on neither and
showed in pieces — a ``-K`` password quoted in a step's summary on a 40-column terminal, say.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from deploy import masking
from deploy.engine.results import StepResult
from deploy.report.progress import ProgressPrinter
from deploy.report.text import shorten_end, shorten_middle, wrap

SECRET = "sudo-pass-typed-at-K-0123456789"


@pytest.fixture(autouse=True)
def secret() -> Iterator[None]:
    masking.MASKER.clear()
    masking.register(SECRET)
    yield
    masking.MASKER.clear()


def _shown(lines: list[str]) -> str:
    return "\n".join(masking.mask(line) for line in lines)


def _no_piece(text: str) -> None:
    for start in range(len(SECRET) - 5):
        assert SECRET[start : start + 6] not in text, text


def test_a_long_word_split_over_lines_does_not_split_a_secret() -> None:
    text = f"refused: db_url=postgres://ops:{SECRET}@db.internal/prod"
    shown = _shown(wrap(text, 40, "    "))
    _no_piece(shown)
    assert "***" in shown


@pytest.mark.parametrize("shorten", [shorten_end, shorten_middle])
def test_a_shortened_text_shows_no_piece_of_a_secret(shorten: object) -> None:
    text = f"{SECRET} to db.internal, then wait for it to answer"
    shown = masking.mask(shorten(text, 30))  # type: ignore[operator]
    _no_piece(shown)


def test_a_failed_steps_summary_on_a_narrow_terminal_shows_no_piece_of_a_secret() -> None:
    out = io.StringIO()
    stream = masking.MaskedStream(out)
    printer = ProgressPrinter(stream, width=40, colour=False, heartbeat=0)  # type: ignore[arg-type]
    summary = f"sudo: the password ops:{SECRET}@gpu-1 was refused"
    printer.step_finished("gpu-1", StepResult(4, "restart", "Restart", "failed", summary))
    stream.flush()
    _no_piece(out.getvalue())
    assert "***" in out.getvalue()
