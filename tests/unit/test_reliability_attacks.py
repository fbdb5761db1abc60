"""The attacker suite's section of docs/reliability.md: rendered from records, replaced alone."""

from __future__ import annotations

from tools import reliability

RECORDS = [
    {
        "kind": "fault",
        "fault": "cut",
        "point": "write",
        "next_command": "apply",
        "fault_exit": 1,
        "fault_outcome": "rolled back",
        "next_exit": 0,
        "file_state": "before",
        "service_state": "n/a",
        "consistent": True,
        "truthful": True,
        "bytes_lost": 0,
        "note": "",
    },
    {"kind": "attack", "name": "swap", "tries": 4, "successes": 0, "left": "nothing | a"},
    {"kind": "attack", "name": "flip", "tries": 3, "successes": 2, "left": "root bytes"},
    {"kind": "secret", "name": "masked", "passed": True},
]
TESTS = [
    {"name": "test_attack_files::test_swap", "seconds": 12.0, "outcome": "passed"},
    {"name": "test_attack_files::test_flip", "seconds": 9.0, "outcome": "failed"},
    {"name": "test_hostile::test_x", "seconds": 1.0, "outcome": "passed"},
]


def test_section_has_one_row_per_attack_and_totals() -> None:
    lines = reliability.attack_section(RECORDS, TESTS, 21.0)
    assert lines[0] == reliability.ATTACKS_BEGIN and lines[-1] == reliability.ATTACKS_END
    text = "\n".join(lines)
    assert "2 attack tests in 21 s (1 failed); 2 successes in 7 tries." in text
    assert "| swap | 4 | 0 | nothing \\| a |" in text
    assert "| flip | 3 | **2** | root bytes |" in text


def test_replace_keeps_the_rest_of_the_page() -> None:
    page = "# R\n\nfigures\n\n## Decisions\n\n- a\n"
    first = reliability.replace_attacks(page, ["BEGIN?", "x"])  # no markers yet: inserted
    assert first.index("BEGIN?") < first.index("## Decisions") and first.endswith("- a\n")
    section = reliability.attack_section(RECORDS, TESTS, 1.0)
    once = reliability.replace_attacks(page, section)
    again = reliability.replace_attacks(once, reliability.attack_section(RECORDS[:2], TESTS, 1.0))
    assert again.count(reliability.ATTACKS_BEGIN) == 1 and "flip" not in again
    assert again.startswith("# R\n\nfigures\n\n") and again.endswith("## Decisions\n\n- a\n")


def test_attack_records_are_not_counted_as_checks() -> None:
    page = reliability.render(RECORDS, TESTS, 30.0)
    assert "| hostile-input, generated-input and secret checks passed | 1 / 1 |" in page
    assert reliability.ATTACKS_BEGIN in page
