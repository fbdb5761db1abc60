"""`bench.ablate`'s arithmetic and page, and the switches it sets (`deploy.ablation`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.__main__ import kept_sections
from bench.ablate import ALL_ON, Cell, Run, render
from deploy.ablation import MECHANISMS


def _cell() -> Cell:
    cell = Cell(1, 0)
    for seconds, off in ((1.0, 1.2), (2.0, 2.0), (1.0, 0.9)):
        for kind in ("change", "rerun"):
            cell.add(ALL_ON, kind, Run(seconds, 0.2))
            cell.add("quickack", kind, Run(off, 0.25))
    cell.add("floor", "connect", Run(0.5, 0.1))
    return cell


def test_an_effect_is_paired_with_the_all_on_run_of_the_same_round() -> None:
    assert [round(r, 3) for r in _cell().ratios("quickack", "change")] == [1.2, 1.0, 0.9]


def test_the_page_gives_median_and_range_per_cell() -> None:
    text = "\n".join(render([_cell()], {"quickack": {"change": "6", "rerun": "5"}}, 400, 0))
    assert "| quickack | +0.0 % [-10, +20] |" in text
    assert "| all on | 1.00 s [1.00–2.00] |" in text


def test_a_regenerated_page_keeps_the_ablation_section(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text("# P\n\n## Seconds\nold\n\n## Ablation (issue 33)\n\n### Decisions\nx\n")
    assert kept_sections(page) == "\n## Ablation (issue 33)\n\n### Decisions\nx\n"
    assert kept_sections(tmp_path / "missing.md") == ""


def test_a_switch_is_read_from_the_environment() -> None:
    code = "from deploy import ablation; print(sorted(ablation.OFF), ablation.off('quickack'))"
    env = {**os.environ, "DEPLOY_ABLATE": "quickack,compression"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out == "['compression', 'quickack'] True\n"
    assert set(MECHANISMS) >= {"quickack", "compression", "readahead"}


_EFFECTS = """
import socket
from deploy.remote import connect

left, right = socket.socketpair()
transport = connect.Wire(left)
transport.use_compression(True)
compressed = "zlib@openssh.com" in transport.get_security_options().compression
transport.close()
right.close()
class Sock:
    calls = 0
    def setsockopt(self, *args):
        Sock.calls += 1
connect.socket.socket = Sock  # ack_now checks isinstance(sock, socket.socket)
connect.ack_now(Sock())
print(
    "" if Sock.calls else "quickack",
    "" if compressed else "compression",
)
"""


def _effects(off: str) -> set[str]:
    env = {**os.environ, "DEPLOY_ABLATE": off}
    out = subprocess.run(
        [sys.executable, "-c", _EFFECTS], env=env, capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_each_switch_turns_its_mechanism_off_and_nothing_else() -> None:
    assert _effects("") == set()
    for name in ("quickack", "compression"):
        assert _effects(name) == {name}, name
