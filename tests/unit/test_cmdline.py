"""The server's argv and environment as SGLang reads them, and the declared changes (issue 12.1)."""

from __future__ import annotations

import pytest

from deploy.edits.cmdline import (
    ArgValue,
    canonical,
    derive_argv,
    derive_env,
    describe_change,
    masked_argv,
    parse,
    same_argv,
)

PY = ["/venv/bin/python", "-m", "sglang.launch_server"]
MATCH = "sglang.launch_server"
EAGLE3: dict[str, ArgValue] = {
    "--speculative-algorithm": "EAGLE3",
    "--speculative-draft-model-path": "/models/draft",
    "--speculative-num-steps": 3,
}


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("--tp", "--tp-size"),
        ("--tp-size", "--tp-size"),
        ("--tensor-parallel-size", "--tp-size"),
        ("--model", "--model-path"),
        ("--speculative-draft-model", "--speculative-draft-model-path"),
        ("--speculative-algo", "--speculative-algorithm"),
        ("--mem-frac", "--mem-fraction-static"),
        ("--speculative", "--speculative"),  # ambiguous: kept as written
        ("--not-an-sglang-flag", "--not-an-sglang-flag"),
    ],
)
def test_canonical_names(option: str, name: str) -> None:
    assert canonical(option) == name


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        (["--tp", "2"], ["--tp-size", "2"], True),
        (["--tp=2"], ["--tensor-parallel-size", "2"], True),
        (["--host=0.0.0.0", "--port", "30000"], ["--host", "0.0.0.0", "--port=30000"], True),
        (["--trust-remote-code"], ["--trust-remote-code"], True),
        (["--trust-remote-code"], [], False),
        (["--tp", "2"], ["--tp", "4"], False),
        (["--cuda-graph-bs", "1", "2", "4"], ["--cuda-graph-bs=1"], False),
        (["--random-seed", "-1"], ["--random-seed=-1"], True),
    ],
)
def test_same_argv_reads_like_argparse(left: list[str], right: list[str], same: bool) -> None:
    assert same_argv(PY + left, PY + right, MATCH) is same


@pytest.mark.parametrize(
    ("running", "set_", "remove", "expected"),
    [
        # new flags go at the end; the operator's spelling of the rest is kept
        (
            ["--model-path", "m", "--host=0.0.0.0", "--tp", "8"],
            {"--speculative-algorithm": "EAGLE3"},
            [],
            [
                "--model-path",
                "m",
                "--host=0.0.0.0",
                "--tp",
                "8",
                "--speculative-algorithm",
                "EAGLE3",
            ],
        ),
        # an alias or prefix in the running argv is replaced in place, as its full name
        (
            ["--tp=8", "--port", "30000"],
            {"--tp-size": 4},
            [],
            ["--tp-size", "4", "--port", "30000"],
        ),
        # a repeated flag: every occurrence is replaced by one, where the first was
        (
            ["--mem-fraction-static", "0.8", "--port", "1", "--mem-fraction-static=0.9"],
            {"--mem-fraction-static": 0.85},
            [],
            ["--mem-fraction-static", "0.85", "--port", "1"],
        ),
        # store_true: true is a bare flag, false removes it
        (["--port", "1"], {"--enable-metrics": True}, [], ["--port", "1", "--enable-metrics"]),
        (
            ["--trust-remote-code", "--port", "1"],
            {"--trust-remote-code": False},
            [],
            ["--port", "1"],
        ),
        # removal by any spelling, with its values; nargs='+' values go too
        (
            ["--cuda-graph-bs", "1", "2", "4", "--speculative-algo=NEXTN", "--port", "1"],
            {},
            ["--cuda-graph-bs", "--speculative-algorithm"],
            ["--port", "1"],
        ),
        # a list value gives several tokens
        (
            ["--port", "1"],
            {"--cuda-graph-bs": [1, 2]},
            [],
            ["--port", "1", "--cuda-graph-bs", "1", "2"],
        ),
    ],
)
def test_derive_argv(
    running: list[str], set_: dict[str, ArgValue], remove: list[str], expected: list[str]
) -> None:
    assert derive_argv(PY + running, set_, remove, MATCH) == PY + expected


def test_derived_argv_is_a_fixed_point() -> None:
    """Applying the same changes to the result changes nothing: a re-run restarts nothing."""
    once = derive_argv([*PY, "--tp", "8", "--host", "0.0.0.0"], EAGLE3, [], MATCH)
    assert same_argv(derive_argv(once, EAGLE3, [], MATCH), once, MATCH)
    assert not same_argv([*PY, "--tp", "8", "--host", "0.0.0.0"], once, MATCH)


def test_program_part_keeps_interpreter_options() -> None:
    command = parse(["python3", "-u", "-m", "sglang.launch_server", "--port", "1"], MATCH)
    assert command.program == ("python3", "-u", "-m", "sglang.launch_server")
    assert command.values("--port") == ("1",)
    assert parse(["/usr/bin/sglang-serve", "--tp=2"]).values("--tp-size") == ("2",)


@pytest.mark.parametrize(
    ("env", "set_", "unset", "expected"),
    [
        ({"PYTHONPATH": "/src"}, {"PYTHONPATH": ""}, [], {"PYTHONPATH": "/src"}),
        ({"PYTHONPATH": "/src"}, {"PYTHONPATH": "/other"}, [], {"PYTHONPATH": "/other"}),
        ({"A": "1", "B": "2"}, {}, ["B"], {"A": "1"}),
        ({"A": "1"}, {"C": "3"}, ["MISSING"], {"A": "1", "C": "3"}),
    ],
)
def test_derive_env(
    env: dict[str, str], set_: dict[str, str], unset: list[str], expected: dict[str, str]
) -> None:
    assert derive_env(env, set_, unset) == expected


def test_change_is_a_diff_with_secrets_masked() -> None:
    old_env = {"HF_TOKEN": "hf_abc123", "CUDA_VISIBLE_DEVICES": "0,1", "API_KEY": "k1"}
    new_env = {**old_env, "API_KEY": "k2", "SGLANG_X": "1"}
    old = [*PY, "--tp", "2", "--host", "0.0.0.0"]
    text = describe_change(old, derive_argv(old, EAGLE3, [], MATCH), old_env, new_env, match=MATCH)
    assert "+  --speculative-algorithm EAGLE3\n" in text
    assert " /venv/bin/python -m sglang.launch_server\n" in text
    assert "+SGLANG_X=1\n" in text
    assert "hf_abc123" not in text and "k1" not in text and "k2" not in text
    assert "-API_KEY=*** (old value)\n" in text and "+API_KEY=*** (new value)\n" in text
    assert "HF_TOKEN" not in text.replace(" HF_TOKEN=***", "")  # only as context, masked
    assert describe_change(old, old, old_env, old_env, match=MATCH) == ""
    keyed = describe_change(old, [*old, "--api-key=sk-live-1"], old_env, old_env, match=MATCH)
    assert "+  --api-key ***\n" in keyed and "sk-live-1" not in keyed
    assert masked_argv(["p", "--api-key", "k", "--hf-token=t", "--port", "1"]) == [
        "p",
        "--api-key",
        "***",
        "--hf-token=***",
        "--port",
        "1",
    ]
    same_env = describe_change(old, [*old, "--enable-metrics"], old_env, old_env, match=MATCH)
    assert same_env.endswith("(server environment unchanged: 3 entries kept)\n")
