"""deploy's drop-in for a systemd unit (issue 31, point 2): computed from the unit's own text
as ``systemctl cat`` prints it, never from /proc argv; changes accumulate in one file."""

from __future__ import annotations

from deploy.services.desired import Changes
from deploy.services.dropin import (
    compute,
    dropin_path,
    parse_cat,
    parse_env,
    shown,
    split_exec,
    timespan,
)

PATH = dropin_path("/etc/systemd/system", "sglang.service")

CAT = """\
# /lib/systemd/system/sglang.service
[Unit]
Description=SGLang

[Service]
Environment=HF_TOKEN=hf_secret
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path m \\
    --port 30000 --api-key ${SGLANG_KEY}
User=ml

# /etc/systemd/system/sglang.service.d/override.conf
[Service]
ExecStart=
ExecStart=-/usr/bin/python3 -m sglang.launch_server --model-path m --port 30000 --api-key ${SGLANG_KEY} --tp 8
"""

EAGLE = Changes(set={"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": 3})


def test_the_effective_execstart_is_the_last_after_a_reset() -> None:
    unit = parse_cat(CAT)
    assert PATH == "/etc/systemd/system/sglang.service.d/90-deploy.conf"
    prefix, words = split_exec(unit.exec_start() or "")
    assert prefix == "-" and words[-2:] == ["--tp", "8"]
    only_file = parse_cat(CAT.split("# /etc")[0])
    assert split_exec(only_file.exec_start() or "")[1][-2:] == ["--api-key", "${SGLANG_KEY}"]


def test_the_dropin_resets_execstart_and_keeps_variables_unexpanded() -> None:
    drop = compute(parse_cat(CAT), PATH, None, EAGLE, "sglang.launch_server")
    text = drop.after.decode()
    lines = text.splitlines()
    assert "[Service]" in lines
    reset = lines.index("ExecStart=")
    new = lines[reset + 1]
    assert new.startswith("ExecStart=-/usr/bin/python3 -m sglang.launch_server")
    assert "--api-key ${SGLANG_KEY}" in new  # the unit's variable, not its value
    assert "--speculative-algorithm EAGLE3 --speculative-num-steps 3" in new
    assert drop.changed and drop.before is None


def test_changes_accumulate_in_deploys_own_dropin_and_env_is_written() -> None:
    first = compute(parse_cat(CAT), PATH, None, EAGLE, "sglang.launch_server")
    again = CAT + f"\n# {PATH}\n" + first.after.decode()
    env = Changes(env_set={"SGLANG_X": "50%", "TOKEN_Q": 'a"b'}, env_unset=["HF_TOKEN"])
    second = compute(parse_cat(again), PATH, first.after, env, "sglang.launch_server")
    text = second.after.decode()
    assert "--speculative-algorithm EAGLE3" in text  # the first run's change is kept
    assert 'Environment="SGLANG_X=50%%"' in text
    assert "UnsetEnvironment=HF_TOKEN" in text
    ours = parse_cat(f"# {PATH}\n" + text).files[0][1]
    assert parse_env(ours) == ({"SGLANG_X": "50%", "TOKEN_Q": 'a"b'}, ["HF_TOKEN"])
    assert 'a"b' not in shown(second.after).decode()  # a secret-looking name is masked
    # The same changes again: the same file, nothing to do.
    third_cat = CAT + f"\n# {PATH}\n" + text
    assert not compute(
        parse_cat(third_cat), PATH, second.after, env, "sglang.launch_server"
    ).changed


def test_new_values_cannot_expand_specifiers_or_variables() -> None:
    changes = Changes(set={"--speculative-draft-model-path": "/models/%h/$HOME dir"})
    text = compute(parse_cat(CAT), PATH, None, changes, "sglang.launch_server").after.decode()
    assert '"/models/%%h/$$HOME dir"' in text


def test_systemd_time_spans() -> None:
    assert timespan("1min 30s") == 90
    assert timespan("500ms") == 0.5
    assert timespan("infinity") is None
    assert timespan("5s") == 5
