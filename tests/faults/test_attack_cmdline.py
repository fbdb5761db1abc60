"""Secrets readable by another local user in /proc/*/cmdline (issue 14 items 3 and 6).

Any user may read every process's command line. The attacker scans them all, in a loop, for
the token while root's runs restart the server with ``HF_TOKEN`` in the service's env (apply)
and put the old server back (rollback, which restarts it with the environment it had). The
token reaches deploy through ``-e @file`` (0600), so the workstation's own command line does
not carry it: only what deploy itself puts on a command line can be seen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.faults.attacker import Attacker, record_attack
from tests.faults.conftest import REPO, FaultHost

#: Each attacker is a busy loop that keeps a core busy: under pytest-xdist the attacks run on
#: one worker, one after another, so that two of them never starve a 2-core machine at once.
pytestmark = pytest.mark.xdist_group("attacker")

TOKEN = "hf_CmdLine-Secret-4c8d91"
SECONDS = 40.0
TRIES = 4

#: Read every /proc/PID/cmdline until DEADLINE; print when (and in which process) NEEDLE was seen.
SCAN = r"""
import json, os, signal, sys, time
needle, deadline = bytes.fromhex(sys.argv[1]), float(sys.argv[2])  # hex: not in our own argv
hits, scans = [], 0
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
try:
  while time.time() < deadline:
    scans += 1
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        if needle in line:
            argv = line.split(b"\0")
            name = " ".join([os.path.basename(argv[0].decode(errors="replace"))] + [a.decode(errors="replace")[:12] for a in argv[1:3]])
            hits.append([time.time(), int(pid), name])
finally:
  print(json.dumps({"hits": hits, "scans": scans}))
"""


def _playbook(directory: Path) -> Path:
    text = (REPO / "playbooks" / "kimi-eagle3.yaml").read_text()
    env = 'env: {PYTHONPATH: "{{ sglang_pythonpath }}"}'
    assert env in text
    text = text.replace(
        env, 'env: {PYTHONPATH: "{{ sglang_pythonpath }}", HF_TOKEN: "{{ hf_token }}"}'
    )
    book = directory / "kimi-token.yaml"
    book.write_text(text)
    return book


def test_secrets_never_appear_in_any_command_line(  # type: ignore[no-untyped-def]
    make_fault_host, attacker: Attacker, tmp_path: Path
) -> None:
    host: FaultHost = make_fault_host(service=True)
    book = _playbook(tmp_path)
    secrets_file = tmp_path / "secrets.yaml"
    secrets_file.write_text(f"hf_token: {TOKEN}\n")
    secrets_file.chmod(0o600)
    scanner = attacker.python(SCAN, TOKEN.encode().hex(), str(time.time() + SECONDS + 60))
    windows: list[tuple[str, float, float, int]] = []
    began = time.monotonic()
    try:
        while len(windows) < TRIES and time.monotonic() - began < SECONDS:
            for command in (
                ("apply", str(book), "-e", f"@{secrets_file}", "--yes"),
                ("rollback", "--yes"),
            ):
                start = time.time()
                result = host.deploy(*command, timeout=180)
                windows.append((command[0], start, time.time(), result.exit_code))
    finally:
        scanner.terminate()
        out, err = scanner.communicate()
    assert out, err
    report = json.loads(out) if out.strip() else {"hits": [], "scans": 0}
    hits = report["hits"]
    won = [w for w in windows if any(w[1] <= h[0] <= w[2] for h in hits)]
    seen_in = sorted({h[2] for h in hits})
    record_attack(
        "secrets in /proc/*/cmdline (service env on restart, old env on rollback)",
        len(windows),
        len(won),
        f"token seen in: {', '.join(seen_in)}"
        if hits
        else f"nothing ({report['scans']} scans of /proc)",
    )
    assert next(w[3] for w in windows if w[0] == "apply") == 0, windows
    assert not hits, seen_in
