"""deploy.masking: what is a secret, and its replacement by *** in text, data and streams."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from deploy import masking
from deploy.engine.results import HostResult, RunResult, StepResult


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    masking.MASKER.clear()
    yield
    masking.MASKER.clear()


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("hf_token", True),
        ("DB_PASSWORD", True),
        ("api_key", True),
        ("client_secret", True),
        ("model_file", False),
        ("tp", False),
        ("apikey", True),
        ("--api-key", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("db.passwd", True),
        # Counts and tokenizers are not secrets: a plan must show them.
        ("max_new_tokens", False),
        ("--speculative-num-draft-tokens", False),
        ("--tokenizer-path", False),
        ("num_keys", False),
    ],
)
def test_secret_names_by_default(name: str, secret: bool) -> None:
    assert masking.is_secret_name(name) is secret


def test_name_value_text_is_masked_only_for_secret_names() -> None:
    text = masking.mask("HF_TOKEN=hf_abcdef MAX_TOKENS=8192 AWS_SECRET_ACCESS_KEY=abcd1234")
    assert text == "HF_TOKEN=*** MAX_TOKENS=8192 AWS_SECRET_ACCESS_KEY=***"


def test_listed_names_are_secret() -> None:
    assert masking.is_secret_name("vault_blob", ["vault_blob"])


def test_values_are_masked_inside_text_longest_first() -> None:
    masking.register_vars({"hf_token": "hf_abcd", "other": "hf_abcd_long", "tp": "8"}, ["other"])
    masking.register_vars({"tp": "8"})
    text = masking.mask("Bearer hf_abcd_long and hf_abcd, tp 8")
    assert text == "Bearer *** and ***, tp 8"


def test_short_values_are_not_masked_as_substrings_but_env_assignments_are() -> None:
    masking.register("abc")
    assert masking.mask("abc HF_TOKEN=abc sorted(key=len)") == "abc HF_TOKEN=*** sorted(key=len)"


def test_argv_masks_secret_extra_vars_by_name_before_anything_is_registered() -> None:
    argv = ["apply", "pb", "-e", "hf_token=hf_x", "-e", "tp=8", "--extra-vars=db_password=pw"]
    assert masking.mask_argv(argv) == [
        "apply",
        "pb",
        "-e",
        "hf_token=***",
        "-e",
        "tp=8",
        "--extra-vars=db_password=***",
    ]


def test_json_reports_are_masked_at_the_boundary() -> None:
    masking.register("s3cr3t-value")
    step = StepResult(
        0, "patch", "t", "changed", summary="wrote s3cr3t-value", diff="+s3cr3t-value"
    )
    run = RunResult("r1", "apply", "pb", "now", hosts=[HostResult("h", steps=[step])])
    run.argv = ["-e", "vault=s3cr3t-value"]
    text = json.dumps(run.to_dict())
    assert "s3cr3t-value" not in text and text.count("***") == 3
    assert run.hosts[0].steps[0].diff == "+s3cr3t-value"  # the run itself is not changed


def test_environment_file_read_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_TEST_PW", "pw-from-env")
    masking.register_env("DEPLOY_TEST_PW")
    masking.register_env(None)
    assert masking.mask("x pw-from-env y") == "x *** y"


def test_stream_masks_a_secret_written_in_pieces() -> None:
    masking.register("s3cr3t-value")
    inner = io.StringIO()
    stream = masking.MaskedStream(inner)
    stream.write("a s3cr")
    stream.write("3t-value b\nc ")
    stream.write("s3cr3t-value")
    stream.flush()
    assert inner.getvalue() == "a *** b\nc ***"
    assert not hasattr(stream, "buffer")


def test_mappings_mask_values_of_secret_keys() -> None:
    env = {"HF_TOKEN": "hf_unregistered", "CUDA_VISIBLE_DEVICES": "0,1", "api_key": ""}
    assert masking.mask_data({"env": env}) == {
        "env": {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0,1", "api_key": ""}
    }
