"""The shell programs deploy runs on hosts pass shellcheck (issue 32 point 7): as files, and as
sent.

They are files, ``deploy/hostsh/*.sh`` (`deploy.hostsh`): each is checked on its own, the parts
it runs (``. ./NAME.sh``) followed, under POSIX sh (dash, as under become) and bash (a login
shell); and each program is checked again as the host receives it — the quoted assignments of
its inputs, then its text with its parts in place. Excluded, each on purpose:

- SC2094 (a file read and written in one pipeline): the loop's fifos are read and written by
  design (``loop.sh``);
- SC3013 (``-ef`` is not POSIX): dash, bash and busybox ash all have it, and the interpreter
  check needs it (``paths.sh``);
- SC2015 (``A && B || C``): used only where C must run when A or B fails (``continue``);
- for the files only, SC2154 (a variable used but not assigned) and SC2034 (assigned but not
  used): a file's inputs are assigned by the preamble and a part's outputs are used by the
  program that runs it; the programs as sent are checked with both on.

SC2086 is disabled in the header of the files that split a word on purpose (each says why).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy import hostsh
from deploy.checks import compile as compile_check
from deploy.checks.compile import compile_command, compile_stdin_command
from deploy.checks.interpreter import REFUSED, root_only_if_trusted
from deploy.engine.status import status_script
from deploy.remote.hostfiles import HELPER_SOURCE
from deploy.remote.lock import lock_script

EXCLUDED = "SC2094,SC3013,SC2015"
FILES = sorted(path.name for path in hostsh.DIRECTORY.glob("*.sh"))

needs_shellcheck = pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck")


def _programs() -> dict[str, str]:
    # The helper's programs are Python, not checked here (shellcheck takes their quoted
    # text for shell meant to expand: SC2016).
    assert HELPER_SOURCE
    return {
        "lock": lock_script("/var/lib/deploy", "{}", ahead="CALL 2 0 0\n{}", agent="x"),
        "status": status_script("/var/lib/deploy"),
        "compile": compile_command(
            "/opt/venv/bin/python", "/srv/x.py", cache="/var/lib/deploy/compiled"
        ),
        "compile_uncached": compile_command("/opt/venv/bin/python", "/srv/x.py"),
        "compile_stdin": compile_stdin_command("python3", "/srv/x.py"),
        "root_only": root_only_if_trusted("/opt/venv/bin/python", "/opt/venv/bin/python -V"),
    }


def _shellcheck(path: Path, shell: str, excluded: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["shellcheck", "-x", "-P", "SCRIPTDIR", "-s", shell, "-e", excluded, str(path)],
        capture_output=True,
        text=True,
    )


@needs_shellcheck
@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("name", FILES)
def test_each_host_shell_file_passes_shellcheck(name: str, shell: str) -> None:
    out = _shellcheck(hostsh.DIRECTORY / name, shell, EXCLUDED + ",SC2154,SC2034")
    assert out.returncode == 0, out.stdout


@needs_shellcheck
@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("name", sorted(_programs()))
def test_host_shell_programs_pass_shellcheck_as_sent(tmp_path: Path, name: str, shell: str) -> None:
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/{shell}\n" + _programs()[name])
    out = _shellcheck(script, shell, EXCLUDED + ",SC2086")
    assert out.returncode == 0, out.stdout


def test_the_files_hold_no_placeholders_and_every_part_exists() -> None:
    """Static text: no ``{name}`` for Python to fill in; each ``. ./NAME.sh`` is a file."""
    for name in FILES:
        raw = (hostsh.DIRECTORY / name).read_text()
        assert not re.search(r"(?<![$#%])\{[a-z_]+\}", raw), name
        for part in re.findall(r"^\. \./(\S+)$", raw, re.MULTILINE):
            assert (hostsh.DIRECTORY / part).is_file(), (name, part)
        assert "\n. ./" not in "\n" + hostsh.text(name), name  # every part in place


def test_the_programs_as_sent_are_assignments_then_the_file() -> None:
    """What varies reaches a program only through its quoted preamble: a state_dir holding
    quotes, ``$`` and a line break is one word, and the file's text follows unchanged."""
    state = "/srv/it's $(x)\n`y`"
    sent = status_script(state)
    assert sent == f"_dS={hostsh.assignments({'_dS': state})[4:]}" + hostsh.text("status.sh")
    out = subprocess.run(
        ["sh", "-c", hostsh.assignments({"_dS": state}) + 'printf %s "$_dS"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == state
    with pytest.raises(ValueError):
        hostsh.assignments({"a b": "x"})


def test_the_compile_files_say_what_the_python_constants_say() -> None:
    """The literals of ``compile_cached.sh``, ``compile.sh``, ``owner.sh`` and ``root_only.sh``
    are `deploy.checks.compile`'s and `deploy.checks.interpreter`'s constants."""
    cached = hostsh.text("compile_cached.sh")
    assert f'"${{{compile_check.AHEAD_VARIABLE}-}}"' in cached
    assert (
        cached.count(f"echo '{compile_check.NOT_RECORDED}' >&2; exit {compile_check.AHEAD_STATUS}")
        == 2
    )
    assert f"printf '%s %s\\n' '{compile_check.CACHED}'" in cached
    assert f'[ "${{f%%:*}}" -gt {compile_check._STATIC_SIZE} ]' in cached
    assert f"for l in {compile_check._LIBPYTHON}; do" in cached
    flags = " ".join(compile_check._FLAGS)
    assert f'exec "$_tE" {flags} -c "$_tC"' in cached
    assert f'exec "$_tE" {flags} -c "$_tC"' in hostsh.text("compile.sh")
    owner = hostsh.text("owner.sh")
    assert f'env -i {compile_check._OWNER_PATH} $_tS "$_tP" {flags} -c "$_tO"' in owner
    assert f"exit {REFUSED}" in hostsh.text("root_only.sh")
    assert f"exit {REFUSED}" in hostsh.text("run_as.sh")
