"""Generated inventories and playbooks: each one loads, or fails with a one-line message.

tests/unit/test_config_property.py mangles YAML *text* (syntax noise, random shapes). This
module builds documents of the right *shape* whose values are hostile — shell metacharacters,
newlines, `..`, unicode, out-of-range ports, templates that fail late — the input an operator
or a generator script actually produces. In-process for the bulk (1000 cases, fast), then a
handful through the real CLI subprocess: exit 0 or 2, one line on stderr, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.config.load import load_inventory, load_playbook, resolve
from deploy.errors import InputError
from tests.faults.conftest import record_check
from tests.unit.test_config_property import REQUIRED

NASTY = [
    "a b",
    "x;touch /tmp/deploy-canary",
    "$(touch /tmp/deploy-canary)",
    "`touch /tmp/deploy-canary`",
    "'\"",
    "line\nbreak",
    "../../etc/passwd",
    "/opt/../etc/x",
    "{{ undefined_var }}",
    "{{ 1/0 }}",
    "{{ x | quote }}",
    "{% for %}",
    "ünïcödé",
    "\t",
    "",
    "-rf",
    "~/.ssh/id_ed25519",
    "127.0.0.1",
    "gpu-*",
    "!gpu-1",
]
text = st.one_of(st.sampled_from(NASTY), st.text(max_size=10))
scalar = st.one_of(
    text, st.integers(-(2**33), 2**33), st.booleans(), st.none(), st.floats(allow_nan=False)
)
names = st.one_of(st.sampled_from(["gpu-1", "gpu-2", "all", "gpus"]), text)


@st.composite
def inventories(draw: st.DrawFn) -> dict[str, Any]:
    hosts = {}
    for name in draw(st.lists(names, min_size=1, max_size=3, unique_by=str)):
        entry = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "address": text,
                    "port": st.one_of(st.integers(-5, 70000), text),
                    "user": text,
                    "identity_file": text,
                    "known_hosts": text,
                    "state_dir": text,
                    "password_env": text,
                    "connect_timeout": scalar,
                    "accept_new_host_keys": scalar,
                    "vars": st.dictionaries(text, scalar, max_size=3),
                },
            )
        )
        hosts[str(name)] = entry
    groups = draw(st.dictionaries(names, st.lists(names, max_size=3), max_size=2))
    return {
        "hosts": hosts,
        "groups": groups,
        "vars": draw(st.dictionaries(text, scalar, max_size=3)),
    }


@st.composite
def playbooks(draw: st.DrawFn) -> dict[str, Any]:
    steps = []
    for action in draw(st.lists(st.sampled_from(sorted(REQUIRED)), min_size=1, max_size=3)):
        args = {key: draw(text) for key in REQUIRED[action]}
        steps.append({action: args, **({"name": draw(text)} if draw(st.booleans()) else {})})
    return {
        "name": draw(text),
        "hosts": draw(names),
        "vars": draw(st.dictionaries(text, scalar, max_size=3)),
        "steps": steps,
    }


def _one_line(error: InputError) -> None:
    message = str(error)
    assert message and "\n" not in message and "\r" not in message, repr(message)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generated")


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventory=inventories(), playbook=playbooks(), extra=st.dictionaries(text, text, max_size=2))
def test_generated_input_loads_or_fails_in_one_line(
    scratch: Path, inventory: dict[str, Any], playbook: dict[str, Any], extra: dict[str, str]
) -> None:
    (scratch / "hosts.yaml").write_text(yaml.safe_dump(inventory, allow_unicode=True))
    (scratch / "play.yaml").write_text(yaml.safe_dump(playbook, allow_unicode=True))
    try:
        resolve(
            load_inventory(scratch / "hosts.yaml"),
            load_playbook(scratch / "play.yaml"),
            extra_vars=extra,
        )
    except InputError as error:
        _one_line(error)


def test_generated_input_through_the_cli(tmp_path: Path) -> None:
    """A few generated pairs through `deploy validate` and `deploy apply --check` (subprocess)."""
    import random

    rng = random.Random(5)
    (tmp_path / "playbooks").mkdir()
    failures = []
    for case in range(6):
        inventory = {
            "hosts": {
                rng.choice(NASTY) or "h": {
                    "address": "127.0.0.1",
                    "port": rng.choice([1, 70000, "x"]),
                }
            },
            "vars": {rng.choice(NASTY): rng.choice(NASTY)},
        }
        playbook = {
            "name": "g",
            "hosts": rng.choice(["all", *NASTY]),
            "steps": [{"append": {"path": rng.choice(NASTY), "text": rng.choice(NASTY)}}],
        }
        (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(inventory))
        (tmp_path / "playbooks" / "g.yaml").write_text(yaml.safe_dump(playbook))
        for argv in (["validate"], ["apply", "g", "--check", "-e", rng.choice(NASTY) + "=1"]):
            proc = subprocess.run(
                [sys.executable, "-m", "deploy.cli", *argv, "-i", str(tmp_path / "hosts.yaml")],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            ok = (
                "Traceback" not in proc.stdout + proc.stderr
                and proc.returncode in (0, 2, 4)
                and (proc.returncode != 2 or len(proc.stderr.strip().splitlines()) == 1)
            )
            if not ok:
                failures.append((case, argv, proc.returncode, proc.stderr[-500:]))
    record_check("generated", "generated inventories/playbooks through the CLI", not failures)
    assert not failures, failures
